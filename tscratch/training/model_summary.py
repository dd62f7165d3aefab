"""Lightning's model summary at the start of a fit, without its FLOPs column and total.

Lightning 2.6 counts a summary's FLOPs by running the module's `example_input_array`, which
tscratch's tasks leave unset (a batch's shape comes from the data), so every run printed a
column of zeros and `Total FLOPs: 0`. The work a run does is measured where it is known, per
batch: `train/device/mfu` (`tscratch.training.throughput`). `drop_flops` swaps the Trainer's
own summary callback, where it has one (`enable_model_summary`), for the same table without
them: the rich one when Lightning chose rich, the plain one otherwise.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import lightning as L
from lightning.pytorch import callbacks
from lightning.pytorch.utilities.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table

log = logging.getLogger(callbacks.model_summary.__name__)  # where Lightning's own summary logs
FLOPS = "FLOPs"
"""The column of the summary's data that is dropped."""


def totals(
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
) -> list[tuple[str, str]]:
    """The lines under the table, as Lightning words them, less `Total FLOPs`."""
    return [
        ("Trainable params", get_human_readable_count(trainable_parameters)),
        ("Non-trainable params", get_human_readable_count(total_parameters - trainable_parameters)),
        ("Total params", get_human_readable_count(total_parameters)),
        ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
        ("Modules in train mode", str(total_training_modes["train"])),
        ("Modules in eval mode", str(total_training_modes["eval"])),
    ]


class ModelSummaryWithoutFlops(callbacks.ModelSummary):
    """Lightning's plain-text `ModelSummary`, without the FLOPs column and total."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        columns = [column for column in summary_data if column[0] != FLOPS]
        table = _format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes,
            total_flops, *columns,
        )  # fmt: skip
        lines = [line for line in table.splitlines() if not line.endswith("Total Flops")]
        log.info("\n" + "\n".join(lines))


# Lightning's styles for the columns of its rich table; the others are left plain.
_RICH_COLUMNS: dict[str, dict[str, Any]] = {
    " ": {"style": "dim"},
    "Name": {"justify": "left", "no_wrap": True},
    "Params": {"justify": "right"},
    "Params per Device": {"justify": "right"},
    "In sizes": {"justify": "right", "style": "white"},
    "Out sizes": {"justify": "right", "style": "white"},
}


class RichModelSummaryWithoutFlops(callbacks.RichModelSummary):
    """Lightning's `RichModelSummary`, without the FLOPs column and total."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        from rich import get_console
        from rich.table import Table

        columns = [column for column in summary_data if column[0] != FLOPS]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, **_RICH_COLUMNS.get(name, {}))
        for row in zip(*(values for _, values in columns), strict=True):
            table.add_row(*row)
        grid = Table.grid(expand=True)
        grid.add_column()
        for label, value in totals(
            total_parameters, trainable_parameters, model_size, total_training_modes
        ):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console = get_console()
        console.print(table)
        console.print(grid)


def drop_flops(trainer: L.Trainer) -> None:
    """Replace the Trainer's Lightning model summary (plain or rich) by the same one without
    FLOPs, at the same depth; a trainer without one (`enable_model_summary=False`) keeps none."""
    if "total_flops" not in inspect.signature(callbacks.ModelSummary.summarize).parameters:
        return  # Lightning before 2.6 counts no FLOPs: its own summary is already without them
    swaps = {
        callbacks.ModelSummary: ModelSummaryWithoutFlops,
        callbacks.RichModelSummary: RichModelSummaryWithoutFlops,
    }
    for i, callback in enumerate(trainer.callbacks):
        if (quiet := swaps.get(type(callback))) is not None:
            trainer.callbacks[i] = quiet(callback._max_depth, **callback._summarize_kwargs)
