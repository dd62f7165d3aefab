"""The pieces of scripts/bench.py, one concern per module.

- `models`: the shapes, the batch, and the implementations (tscratch, explicit, torch, and
  checkpointed on request);
- `timing`: one training or inference step, and interleaved timing of a grid cell;
- `memory`: peak memory of one implementation in a fresh subprocess;
- `grid`: the grid of cells, FLOP/s against the measured matmul peak, the report;
- `report`: ratios, targets, machine description and the markdown tables;
- `data`: the end-to-end data-loader mode (`--data`).
"""
