"""``specbound inspect CHECKPOINT``: the detected family and layout, the config values used, every
tensor read (and as what), every tensor ignored (and why), and what a certified number would be
about (:func:`specbound.api.inspect`, rendered here; for a foreign checkpoint, that it is about the
analysis model, not the checkpoint's own network: :func:`specbound.scope.pretrained_note`)."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint file (.safetensors/.pt/.bin/.npz/.gguf), "
                        "Hugging Face folder or cached repo id")
    parser.add_argument("--num-heads", type=int, default=None, metavar="H",
                        help="attention heads (needed for a state dict without a config)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from specbound.api import inspect

    report = inspect(args.checkpoint, num_heads=args.num_heads)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return 0
    out = sys.stdout
    out.write(f"checkpoint  {args.checkpoint} ({report.container})\n")
    out.write(f"family      {report.family} (adapter {report.layout}: {', '.join(report.families)})\n")
    out.write(f"model       {report.variant}; certify {report.certify}\n")
    a = report.architecture
    out.write(f"shape       L={a['num_layers']} H={a['num_heads']} H_kv={a['num_kv_heads']} "
              f"N={a['width']} d_h={a['head_dim']} d_ff={a['ff_dim']} activation={a['activation']} "
              f"({a['matrices']} covered matrices)\n")
    out.write("config used\n")
    for key, value in report.config_used.items():
        out.write(f"  {key} = {value!r}\n")
    out.write(f"tensors read ({len(report.tensors_read)})\n")
    for name, info in report.tensors_read.items():
        quant = f" {info['quantization']}" if "quantization" in info else ""
        out.write(f"  {name} {tuple(info['shape'])} {info['dtype']}{quant}: {info['as']}\n")
    out.write(f"tensors ignored ({len(report.tensors_ignored)})\n")
    for name, info in report.tensors_ignored.items():
        out.write(f"  {name} {tuple(info['shape'])}: {info['reason']}\n")
    out.write(f"scope       {report.statement}\n")
    from specbound.scope import pretrained_note

    for line in pretrained_note(report.scope.get("own_network") is True, "a certified number of this checkpoint"):
        out.write(line + "\n")
    return 0
