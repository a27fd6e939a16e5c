"""`kbench calibrate`: measure this GPU's real copy bandwidth, tensor and fp32 throughput, and keep them."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from kbench.cli.common import stderr, stdout, user_errors


def calibrate_command(
    folder: Path = typer.Option(Path("results") / "calibration", "--folder",
                                help="Where calibrations are kept, one file per device fingerprint."),
) -> None:
    """Measure the device's ceilings (copy bandwidth, fp16 tensor, fp32 FMA) for `kbench roofline`."""
    from kbench import calibrate
    from kbench.devices import peaks_for

    with user_errors():
        data = calibrate.measure(announce=lambda: stderr.print(
            "measuring: 2 GiB copy, 8192³ fp16 matmul, fp32 FMA kernel (about a minute)"))
        path = calibrate.save(data, folder)
    peaks = peaks_for(data["gpu"]["name"])
    table = Table(title=f"calibration of {data['gpu']['name']} ({path})", title_justify="left")
    for column in ("ceiling", "measured", "datasheet", "measured / datasheet", "how"):
        table.add_column(column)
    rows = (("HBM TB/s", data["hbm_tbs"], peaks.hbm_tbs if peaks else None, "hbm_tbs"),
            ("fp16 tensor TFLOP/s", data["fp16_tensor_tflops"], peaks.tflops["fp16"] if peaks else None,
             "fp16_tensor_tflops"),
            ("fp32 TFLOP/s", data["fp32_tflops"], peaks.tflops["fp32"] if peaks else None, "fp32_tflops"))
    for name, measured, sheet, key in rows:
        table.add_row(name, f"{measured:.2f}", f"{sheet:g}" if sheet else "-",
                      f"{measured / sheet:.0%}" if sheet else "-", data["method"][key])
    stdout.print(table)
