"""Entry points that `scripts/*.py` call: `fit` (the LightningCLI), `pretrain`, `evaluate`
(test.py), `predict`, `export` and `serve`; `classifiers.open_classifier` is what the last three
share to open a model."""
