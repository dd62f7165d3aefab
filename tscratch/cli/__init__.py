"""Entry points: `fit` (the LightningCLI), `predict` and `evaluate`; `scripts/*.py` call these."""
