"""The recipe: what `tscratch fit` does with a dataset, decided from the data before any work.

Between the training side (`tscratch.training`) and the commands (`tscratch.cli`):
- `profile`: what the rules read from the training split (token estimates, `DataProfile`);
- `settings`: the rules behind `auto` options (length, vocabulary, token dropout, token pairs,
  passes);
- `rule`: which stages run first (`plain`, `pretrain`, `distil`) and why;
- `commands`: the stage commands and the budgets that size them;
- `estimate`: a step's measured time on this machine;
- `sizing`: what every estimate reads (the config, the data, the measured steps), and the time a
  pretrained encoder takes to read a vocabulary for its vectors;
- `stages`: each part of the run with its steps and estimated time (`teachers`: the teacher's
  fine-tuning and its reading of the transfer set);
- `stopping`: `--patience`, its checks and what `auto` chooses;
- `plan`: the frozen `Plan` that holds all of it; `planner.make_plan` builds it.
"""
