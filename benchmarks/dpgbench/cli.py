"""``flowrl eval dpg``: DPG-Bench's questions, generation, VQA judging and summary from the shell.

    flowrl eval dpg [--prompts CSV_OR_ELLA_CHECKOUT] --check
    flowrl eval dpg [--prompts ...] --generate RUN_DIR_OR_RECIPE --out DIR [--steps N] [--guidance W]
                    [--seed S] [key=value ...]            (4 images per prompt, then OUT/grids/{key}.png)
    flowrl eval dpg [--prompts ...] --judge IMAGE_DIR --out DIR (--base-url URL --judge-model NAME |
                    --judge-model LOCAL_OR_HUB) [--answer-rule first-word|exact] [--resume]
    flowrl eval dpg [--prompts ...] --summary OUT_DIR [--json]

``--prompts`` defaults to ``$DPG_BENCH_CSV``, else a copy of ELLA's ``dpg_bench.csv`` fetched once into
flowrl's cache. ``--judge`` reads ``{key}_{k}.png`` or the official grids ``{key}.png``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flowrl.benchmarks.commands import add_judged_steps


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "dpg", help="DPG-Bench: check questions, generate 2 x 2 grids, judge with a VQA model, summarise",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--prompts", default=None, help="dpg_bench.csv or an ELLA checkout (default: see above)")
    add_judged_steps(
        p,
        check="validate the CSV; print its counts",
        generate="draw 4 images per prompt and their grids",
        judge="score a folder of {key}_{k}.png or {key}.png grids",
        limit="only the first N prompts (smoke runs)",
    )
    g = p.add_argument_group("generation (--generate)")
    g.add_argument("--steps", type=int, default=None, help="default: the run's sample.eval_num_steps")
    g.add_argument("--guidance", type=float, default=None, help="default: the run's sample.eval_guidance_scale")
    g.add_argument("--seed", type=int, default=42, help="image k of prompt i uses seed + i * 4 + k (default 42)")
    g.add_argument("--batch-size", type=int, default=None, help="images per pipeline call; local VQA batch")
    g.add_argument("overrides", nargs="*", help="key=value config overrides for --generate")
    j = p.add_argument_group("judge (--judge)")
    j.add_argument("--judge-model", default=None, help="served model name with --base-url, else a local VLM")
    j.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (vLLM), e.g. http://127.0.0.1:8000/v1")
    j.add_argument("--answer-rule", default="first-word", help="first-word (default: chat VLMs) | exact (== 'yes')")
    j.add_argument(
        "--question-suffix", default=None, help="text after each question (default ' Please answer yes or no.')"
    )
    j.add_argument("--pic-num", type=int, default=4, help="crops per prompt (official 4)")
    j.add_argument("--resolution", type=int, default=None, help="grid crop size (default: half the grid's width)")
    j.add_argument("--max-tokens", type=int, default=16)
    j.add_argument("--judge-version", default=None, help="version to pin in the results")
    j.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    j.add_argument("--judge-dtype", default="bf16", help="local VLM: fp32 | fp16 | bf16")
    j.add_argument("--device", default=None, help="local VLM device (default: cuda when available)")
    j.add_argument("--resume", action="store_true", help="continue an interrupted --judge run in --out")
    p.add_argument("--json", action="store_true", help="with --summary: print JSON instead of Markdown")
    p.set_defaults(fn=cmd_dpg)


def cmd_dpg(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.commands import print_main, require_out

    from .data import OFFICIAL_PROMPTS, as_item, describe_source, load_questions
    from .evaluate import score_folder, summarize_run
    from .scoring import summary_markdown

    if args.overrides and not args.generate:
        raise ValueError(f"key=value overrides ({args.overrides[0]}, ...) apply to --generate only")
    for name in ("limit", "pic_num", "max_tokens", "resolution"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
    questions = load_questions(args.prompts)
    source = describe_source(args.prompts)
    if args.check:
        count = sum(len(q.question) for q in questions.values())
        print(f"{source['source']}: {len(questions)} prompts (the official set has {OFFICIAL_PROMPTS}), {count} "
              f"questions as the official scorer reads them; sha256 {source['sha256'][:12]}")  # fmt: skip
        return 0
    if args.generate:
        from .generate import generate_dpg

        out = require_out(args, "--generate")
        items = [as_item(q) for q in questions.values()][: args.limit or None]
        record = generate_dpg(args.generate, items, out, overrides=args.overrides, seed=args.seed, steps=args.steps,
                              guidance=args.guidance, batch_size=args.batch_size, prompt_set=source)  # fmt: skip
        print_main(f"wrote {record['images']} images for {record['prompts']} prompts to {out} and their grids to "
                    f"{Path(out) / 'grids'}; score with: flowrl eval dpg --judge {out} --out DIR")  # fmt: skip
        return 0
    if args.judge:
        out = require_out(args, "--judge")
        options = {
            "prompts": args.prompts, "questions": questions, "limit": args.limit, "resume": args.resume,
            "model": args.judge_model, "base_url": args.base_url, "answer_rule": args.answer_rule,
            "pic_num": args.pic_num, "resolution": args.resolution, "max_tokens": args.max_tokens,
            "version": args.judge_version, "api_key": args.api_key, "dtype": args.judge_dtype, "device": args.device,
            "batch_size": args.batch_size, "prompt_set": source,
        }  # fmt: skip
        if args.question_suffix is not None:
            options["question_suffix"] = args.question_suffix
        summary = score_folder(args.judge, out, options)
        print(summary_markdown(summary), end="")
        print(f"wrote {Path(out) / 'summary.json'}, {Path(out) / 'summary.md'} and {Path(out) / 'progress.jsonl'}")
        return 0
    summary = summarize_run(args.summary, list(questions.values()))
    print(json.dumps(summary, indent=2) if args.json else summary_markdown(summary), end="\n" if args.json else "")
    return 0
