"""``flowrl eval geneval2``: GenEval 2's prompts, generation, Soft-TIFA judging and summary from the shell.

    flowrl eval geneval2 [--prompts FILE_OR_CHECKOUT] --check
    flowrl eval geneval2 [--prompts ...] --generate RUN_DIR_OR_RECIPE --out DIR [--preset unirl|flowrl]
                         [--steps N] [--guidance W] [--seed S] [--images-per-prompt N] [key=value ...]
    flowrl eval geneval2 [--prompts ...] --judge IMAGE_DIR --out DIR
                         [--judge-model Qwen/Qwen3-VL-8B-Instruct | --base-url URL --judge-model NAME
                          [--judge-tokenizer NAME_OR_DIR]] [--resume]
    flowrl eval geneval2 [--prompts ...] --summary OUT_DIR [--json]

``--prompts`` defaults to ``$GENEVAL2_DATA``, else a copy of the official file fetched once into flowrl's
cache (the file is CC BY-NC 4.0 and not shipped).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flowrl.benchmarks.commands import add_judged_steps


def add_command(sub: Any) -> None:
    from .generate import PRESETS
    from .judge import OFFICIAL_JUDGE

    p = sub.add_parser(
        "geneval2", help="GenEval 2: check prompts, generate (UniRL's protocol), judge with Soft-TIFA, summarise",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--prompts", default=None, help="geneval2_data.jsonl or a GenEval2 checkout (default: see above)")
    add_judged_steps(
        p,
        check="validate the prompt file; print its counts",
        generate="draw images with a run folder's weights or a recipe",
        judge="score a folder of {row}_{k}.png images with Soft-TIFA",
        limit="only the first N prompts (smoke runs)",
    )
    p.add_argument("--images-per-prompt", type=int, default=None, help="default: the preset's (1)")
    g = p.add_argument_group("generation (--generate)")
    g.add_argument("--preset", default="unirl", help=f"{' | '.join(PRESETS)} (default unirl: 512 px, 40 steps, CFG 1)")
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--guidance", type=float, default=None)
    g.add_argument("--seed", type=int, default=None, help="base seed (default 42)")
    g.add_argument("--batch-size", type=int, default=None, help="images per pipeline call; local judge batch")
    g.add_argument("overrides", nargs="*", help="key=value config overrides for --generate")
    j = p.add_argument_group("judge (--judge)")
    j.add_argument("--judge-model", default=None, help=f"local model (default {OFFICIAL_JUDGE}) or served name")
    j.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (vLLM), e.g. http://127.0.0.1:8000/v1")
    j.add_argument("--judge-tokenizer", default=None, help="served judge: its tokenizer (default: --judge-model)")
    j.add_argument("--top-logprobs", type=int, default=20, help="served judge: candidates per question (default 20)")
    j.add_argument("--no-token-ids", action="store_true", help="served judge: match candidates by text (non-vLLM)")
    j.add_argument("--judge-version", default=None, help="version to pin in the results")
    j.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    j.add_argument("--judge-dtype", default="auto", help="local judge: auto (bf16) | fp32 | fp16 | bf16")
    j.add_argument("--device", default=None, help="local judge device (default: cuda when available)")
    j.add_argument("--resume", action="store_true", help="continue an interrupted --judge run in --out")
    p.add_argument(
        "--sim-even-batches", default=None, metavar="WxB",
        help="with --judge / --summary: also UniRL's means over W x B padded waves (e.g. 32x32)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="with --summary: print JSON instead of Markdown")
    p.set_defaults(fn=cmd_geneval2)


def parse_waves(text: str) -> tuple[int, int]:
    """``"32x32"`` -> (32, 32): world size and batch of UniRL's simulated distributed evaluation."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--sim-even-batches {text!r}: expected WxB with positive integers, e.g. 32x32")
    return int(parts[0]), int(parts[1])


def cmd_geneval2(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.commands import print_main, require_out

    from .data import OFFICIAL_PROMPTS, OFFICIAL_QUESTIONS, describe_source, load_items
    from .evaluate import score_folder, summarize_run
    from .scoring import summary_markdown

    if args.overrides and not args.generate:
        raise ValueError(f"key=value overrides ({args.overrides[0]}, ...) apply to --generate only")
    for name in ("limit", "images_per_prompt", "top_logprobs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
    sim_even = parse_waves(args.sim_even_batches) if args.sim_even_batches else None
    items = load_items(args.prompts)
    source = describe_source(args.prompts)
    if args.check:
        questions = sum(len(i["vqa_list"]) for i in items)
        official = "the official file" if source["official"] else "not the official file"
        print(f"{source['source']}: {len(items)} prompts, {questions} questions ({official}; the official "
              f"{OFFICIAL_PROMPTS} prompts hold {OFFICIAL_QUESTIONS}); sha256 {source['sha256'][:12]}")  # fmt: skip
        return 0
    if args.generate:
        from .generate import generate_geneval2

        out = require_out(args, "--generate")
        record = generate_geneval2(
            args.generate, items[: args.limit or None], out, preset=args.preset, overrides=args.overrides,
            images_per_prompt=args.images_per_prompt, seed=args.seed, steps=args.steps, guidance=args.guidance,
            batch_size=args.batch_size, prompt_set=source,
        )  # fmt: skip
        s = record["settings"]
        print_main(f"wrote {record['images']} images for {record['prompts']} prompts to {out} ({args.preset}: "
                    f"{s['height']} px, {s['steps']} steps, guidance {s['guidance_scale']:g}); "
                    f"score with: flowrl eval geneval2 --judge {out} --out DIR")  # fmt: skip
        return 0
    if args.judge:
        out = require_out(args, "--judge")
        options = {
            "prompts": args.prompts, "images_per_prompt": args.images_per_prompt or 1, "limit": args.limit,
            "resume": args.resume, "model": args.judge_model, "base_url": args.base_url,
            "tokenizer": args.judge_tokenizer, "top_logprobs": args.top_logprobs, "token_ids": not args.no_token_ids,
            "version": args.judge_version, "api_key": args.api_key, "dtype": args.judge_dtype, "device": args.device,
            "batch_size": args.batch_size, "items": items, "prompt_set": source, "sim_even_batches": sim_even,
        }  # fmt: skip
        summary = score_folder(args.judge, out, options)
        print(summary_markdown(summary), end="")
        print(f"wrote {Path(out) / 'summary.json'}, {Path(out) / 'summary.md'} and {Path(out) / 'progress.jsonl'}")
        return 0
    summary = summarize_run(args.summary, items, sim_even=sim_even)
    print(json.dumps(summary, indent=2) if args.json else summary_markdown(summary), end="\n" if args.json else "")
    return 0
