"""`kbench env`: the GPU, driver, CUDA and library versions, clocks, and the peaks kbench will use."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from kbench.cli.common import stdout


def env_command(
    as_json: bool = typer.Option(False, "--json", help="Print the environment fingerprint as JSON."),
) -> None:
    """Show the environment every result records: GPU, driver, CUDA, versions, clocks and peaks."""
    from kbench import envinfo
    from kbench.devices import peaks_for

    try:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        device = "cpu"
    env = envinfo.collect(device)
    gpu = env.get("gpu")
    peaks = peaks_for(gpu["name"]) if gpu else None
    env["peaks"] = None if peaks is None else {"table_entry": peaks.name, "tflops": peaks.tflops,
                                               "hbm_tbs": peaks.hbm_tbs, "source": peaks.source}
    if as_json:
        print(json.dumps(env, indent=2))
        return
    table = Table(show_header=False, title="kbench environment", title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("kbench", env["kbench"])
    table.add_row("device", device if gpu is None else f"{gpu['name']} (sm_{gpu['compute_capability'][0]}"
                                                       f"{gpu['compute_capability'][1]}, {gpu['sm_count']} SMs)")
    if gpu:
        table.add_row("GPU UUID", str(gpu.get("uuid")))
        table.add_row("driver / CUDA runtime", f"{gpu.get('driver', '?')} / {gpu.get('cuda_runtime')}")
        table.add_row("memory / L2", f"{gpu['memory_bytes'] / 2**30:.0f} GiB / {(gpu.get('l2_bytes') or 0) / 2**20:.0f} MiB")
        if "sm_clock_max_mhz" in gpu:
            table.add_row("SM clock now / max", f"{gpu['sm_clock_mhz']} / {gpu['sm_clock_max_mhz']} MHz")
            table.add_row("memory clock max / power limit",
                          f"{gpu['mem_clock_max_mhz']} MHz / {gpu['power_limit_w']:.0f} W")
    for name, version in env["packages"].items():
        table.add_row(name, version)
    table.add_row("python", env["python"])
    git = env["git"]
    table.add_row("git commit", f"{git['commit']}{' (dirty)' if git['dirty'] else ''}" if git["commit"] else "-")
    if peaks:
        units = ", ".join(f"{unit} {value:g}" for unit, value in peaks.tflops.items())
        table.add_row("peaks (TFLOP/s)", f"{units} [{peaks.source}]")
        table.add_row("peak HBM", f"{peaks.hbm_tbs} TB/s")
    elif device == "cpu":
        table.add_row("peaks", "none: no GPU (CPU timings are not GPU performance)")
    else:
        table.add_row("peaks", "this GPU is not in kbench's table: % of peak is not shown")
    stdout.print(table)
