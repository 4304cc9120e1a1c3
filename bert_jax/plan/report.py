"""The planner's printout: a table row per plan, where its HBM bytes go, and the verdict."""

GIB, GB, MB = 1024**3, 1e9, 1e6

HEADER = (
    f"{'step':>8} {'mesh':>9} {'remat':>5} {'batch':>10} {'state':>6} {'args':>6} {'temp':>6} "
    f"{'peak/HBM GiB':>13} {'fits':>4} {'compile':>7} {'TFLOP':>6} {'HBM GB':>6} "
    f"{'step ms':>17} {'overlap ms':>13} {'seq/s':>8} {'MFU':>4} {'MFU':>4} "
    f"{'ICI MB':>7} {'DCN MB':>7}\n"
    f"{'':>8} {'d x f x t':>9} {'':>5} {'(per chip)':>10} {'GiB':>6} {'GiB':>6} {'GiB':>6} "
    f"{'(compiler)':>13} {'':>4} {'s':>7} {'/chip':>6} {'(hlo)':>6} "
    f"{'(source, bound)':>17} {'(roofline)':>13} {'(est.)':>8} {'est.':>4} {'ovl.':>4} "
    f"{'(hlo)':>7} {'(hlo)':>7}"
)


def _mesh(r: dict) -> str:
    return "x".join(str(v) for v in r["mesh"].values())


def row(r: dict) -> str:
    per_chip = r["global_batch"] / (r["mesh"]["data"] * r["mesh"]["fsdp"])
    batch = f"{r['global_batch']} ({per_chip:g})"
    head = f"{r['step']:>8} {_mesh(r):>9} {r['remat']!s:>5} {batch:>10} "
    if r.get("refused"):
        need = f"{r['peak_bytes'] / GIB:.2f}" if r["peak_bytes"] else "?"
        return (
            f"{head}{r['state_bytes'] / GIB:6.2f}   NO: the TPU compiler refused it, {need} GiB "
            f"needed past {r['hbm_bytes'] / GIB:.0f} GiB of HBM ({r['compile_s']:.0f} s)"
        )
    line = (
        f"{head}{r['state_bytes'] / GIB:6.2f} {r['argument_bytes'] / GIB:6.2f} "
        f"{r['temp_bytes'] / GIB:6.2f} "
    )
    traffic = r["hbm_traffic"]["total_bytes"] / GB
    if "hbm_bytes" not in r:  # fake CPU devices: XLA:CPU's plan, no chip to judge it by
        return line + (
            f"{r['peak_bytes'] / GIB:13.2f} {'':>4} {r['compile_s']:7.0f} "
            f"{r['cost'].get('flops', 0) / 1e12:6.2f} {traffic:6.2f}"
        )
    splash = r.get("splash_attention_calls") or {}
    if r["step_s"] is None:
        est, overlap, speed = "no estimate", "-", f"{'-':>8} {'-':>4} {'-':>4}"
    else:
        bound = f", {r['bound']}" if r["bound"] else ""
        est = f"{r['step_s'] * 1e3:.1f} ({r['step_source'][:4]}{bound})"
        overlap = f"{r['overlapped_s'] * 1e3:.1f} ({r['overlapped_bound']})"
        speed = f"{r['seq_per_s']:8.0f} {100 * r['mfu']:3.0f}% {100 * r['mfu_overlapped']:3.0f}%"
    return line + (
        f"{r['peak_bytes'] / GIB:6.2f}/{r['hbm_bytes'] / GIB:<6.0f} "
        f"{'yes' if r['fits'] else 'NO':>4} "
        f"{r['compile_s']:7.0f} {r['cost'].get('flops', 0) / 1e12:6.2f} {traffic:6.2f} "
        f"{est:>17} {overlap:>13} {speed} "
        f"{sum(r['ici_bytes'].values()) / MB:7.0f} {r['dcn_bytes'] / MB:7.1f}"
        + (f"  cuDNN attention: {r['cudnn_attention_calls']} calls" if r["chip"] == "h100" else "")
        + (
            f"  splash attention: {splash['global']} global, {splash['local']} local-window calls"
            if any(splash.values())
            else ""
        )
    )


def traffic(r: dict, top: int) -> str:
    """Where one plan's HBM bytes go: the groups, then the `top` instructions."""
    t = r.get("hbm_traffic")
    if not t or top == 0:
        return ""
    total = t["total_bytes"] or 1
    lines = [
        f"  where the HBM bytes of {r['step']} {_mesh(r)} batch {r['global_batch']} go (hlo, "
        f"per chip and step): {t['total_bytes'] / GB:.3f} GB read and written; "
        f"{t['onchip_bytes'] / GB:.3f} GB more in on-chip memory (VMEM; v4's CMEM), not counted"
    ]
    if r.get("cost_source", "compiler") != "compiler":
        lines.append(f"  TFLOP and 'bytes accessed' above: {r['cost_source']}")
    roof = r.get("hlo_roofline")
    if roof and roof["mfu"] is not None:
        lines.append(
            "  the roofline on these HBM bytes (the compiler's 'bytes accessed' counts on-chip "
            f"memory too): serial {roof['serial_s'] * 1e3:.1f} ms ({roof['serial_bound']}), "
            f"overlapped {roof['overlapped_s'] * 1e3:.1f} ms ({roof['overlapped_bound']}); "
            f"MFU est. {100 * roof['mfu']:.0f}% / {100 * roof['mfu_overlapped']:.0f}%"
        )
    lines.append(f"    {'group':<30} {'HBM GB':>8} {'share':>6} {'on-chip GB':>10}")
    for group, size in t["groups"].items():
        onchip = t["onchip_groups"].get(group, 0)
        lines.append(
            f"    {group:<30} {size / GB:8.3f} {100 * size / total:5.1f}% {onchip / GB:10.3f}"
        )
    lines.append(
        f"    {'top ' + str(top) + ' instructions':<30} {'HBM GB':>8}  kind, group; result <- "
        "operands"
    )
    for op in t["top"][:top]:
        times = f" x{op['times']}" if op["times"] > 1 else ""
        lines.append(
            f"    {op['name'][:30]:<30} {op['bytes'] / GB:8.3f}  {op['opcode']}{times}, "
            f"{op['group']}; {op['result']} <- {op['operands']}"
        )
    lines += [f"    note: {note}" for note in t["notes"]]
    return "\n".join(lines)


def verdict(results: list[dict], config_path: str, overrides: list[str]) -> str:
    """The fastest pre-training plan that fits, as the trainer's flags (`overrides` among them)."""
    fits = [r for r in results if r["step"] == "train" and r["fits"] and r["seq_per_s"]]
    if not fits:
        if any(r["step"] == "train" and r["fits"] for r in results):
            return "train-step plans fit; no step-time estimate to rank them (no cost figures)"
        if not any(r["step"] == "train" for r in results):
            return "no train step planned (--steps)"
        return "no train-step plan fits the chip's HBM: add fsdp, remat or a smaller batch"
    best = max(fits, key=lambda r: r["seq_per_s"])
    m = best["mesh"]
    return (
        f"best plan that fits ({best['seq_per_s']:.0f} sequences/s, {100 * best['mfu']:.0f}% MFU, "
        f"{best['step_source']} estimate, not a measurement):\n"
        f"  python -m bert_jax.main --distributed --config={config_path} "
        f"--config.mesh.data={m['data']} --config.mesh.fsdp={m['fsdp']} "
        f"--config.mesh.tensor={m['tensor']} --config.model.remat={best['remat']} "
        f"--config.model.dtype={best['dtype']} "
        f"--config.train.global_batch_size={best['global_batch']}"
        + "".join(f" {o}" for o in overrides)
    )
