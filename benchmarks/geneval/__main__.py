"""``python -m flowrl.benchmarks.geneval {prompts,score,summary}``: the GenEval steps from the shell."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .rules import RuleConfig


def _rule_config(options: list[str]) -> RuleConfig:
    """``key=value`` pairs (GenEval's ``--options``) -> RuleConfig; unknown keys name the allowed ones."""
    try:
        return RuleConfig.from_options(options)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _refuse(args: argparse.Namespace, paths: list[Path]) -> None:
    """A file that exists already is not written over without ``--force`` (one line naming it)."""
    from flowrl.commands import refuse_overwrite

    try:
        refuse_overwrite(paths, "out", args.force)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _prompts(args: argparse.Namespace) -> None:
    from .prompts import write_prompts

    _refuse(args, [args.out, *([args.prompts_txt] if args.prompts_txt else [])])
    path = write_prompts(args.out, seed=args.seed, n=args.n, prompts_txt=args.prompts_txt)
    print(f"wrote {path}")


def _score(args: argparse.Namespace) -> None:
    from .detect import ClipColorClassifier, GenEvalLoadError, QueryInstanceDetector
    from .scoring import score_folder, summary_markdown

    rules = _rule_config(args.option)
    _refuse(args, [args.out / name for name in ("results.jsonl", "summary.json", "summary.md")])
    try:
        floor = min(rules.threshold, rules.counting_threshold)
        detector = QueryInstanceDetector.from_pretrained(args.detector, device=args.device, min_score=floor)
        colors = ClipColorClassifier.from_pretrained(args.clip_arch, args.clip_pretrained, device=args.device)
    except GenEvalLoadError as exc:
        raise SystemExit(f"error: {exc}") from None
    _, summary = score_folder(args.image_dir, detector, colors, rules, out_dir=args.out, batch_size=args.batch_size)
    print(summary_markdown(summary))


def _summary(args: argparse.Namespace) -> None:
    from .scoring import load_results, summarize, summary_markdown, write_summary

    if args.out:
        _refuse(args, [args.out / "summary.json", args.out / "summary.md"])
    summary = summarize(load_results(args.results))
    if args.out:
        write_summary(summary, args.out)
    print(summary_markdown(summary) if not args.json else json.dumps(summary, indent=2))


def build_parser() -> argparse.ArgumentParser:
    from .detect import DEFAULT_CLIP_ARCH, DEFAULT_CLIP_PRETRAINED, DEFAULT_DETECTOR

    parser = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.geneval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prompts", help="write GenEval's evaluation_metadata.jsonl (553 rows at the defaults)")
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=43)
    p.add_argument("--n", type=int, default=100, help="rows drawn per task besides single_object")
    p.add_argument("--prompts-txt", type=Path, default=None, help="also write the plain prompt list here")
    p.add_argument("--force", action="store_true", help="replace the files if they exist")
    p.set_defaults(run=_prompts)
    s = sub.add_parser("score", help="score a GenEval image folder (<NNNNN>/metadata.jsonl + samples/*.png)")
    s.add_argument("image_dir", type=Path)
    s.add_argument("--out", type=Path, required=True, help="folder for results.jsonl, summary.json, summary.md")
    s.add_argument("--detector", default=DEFAULT_DETECTOR, help="transformers model id or local folder")
    s.add_argument("--clip-arch", default=DEFAULT_CLIP_ARCH)
    s.add_argument("--clip-pretrained", default=DEFAULT_CLIP_PRETRAINED, help="open_clip tag or weights file")
    s.add_argument("--device", default=None)
    s.add_argument("--batch-size", type=int, default=8)
    s.add_argument("--option", action="append", default=[], help="rule option key=value (threshold=0.3, ...)")
    s.add_argument("--force", action="store_true", help="replace results of an earlier scoring in --out")
    s.set_defaults(run=_score)
    m = sub.add_parser("summary", help="summarise a results.jsonl (ours or GenEval's)")
    m.add_argument("results", type=Path)
    m.add_argument("--out", type=Path, default=None)
    m.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    m.add_argument("--force", action="store_true", help="replace a summary in --out")
    m.set_defaults(run=_summary)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
