"""`python -m tscratch COMMAND ...`: the same as the `tscratch` console command."""

import sys

from tscratch.cli.stage_process import die_with_parent

if __name__ == "__main__":
    die_with_parent()  # a stage of `tscratch fit --recipe`: bound to its parent, first of all
    from tscratch.cli import main

    sys.exit(main())
