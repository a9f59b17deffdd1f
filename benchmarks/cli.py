"""Benchmark commands, hooked into ``flowrl`` by ``add_commands(subparsers)``:

    flowrl eval geneval --write-prompts FILE [--prompts-txt FILE] [--force]
    flowrl eval geneval --generate RUN_DIR_OR_RECIPE --out DIR [--metadata FILE] [--images-per-prompt 4]
                        [--steps N] [--guidance W] [--seed 42] [--batch-size N] [key=value ...]
    flowrl eval geneval --score IMAGE_DIR --out DIR [--detector ID] [--clip-arch A] [--clip-pretrained P] [--force]
    flowrl eval geneval --summary RESULTS_JSONL [--out DIR] [--force]
    flowrl eval unigenbench --prompts CSV_OR_DATASET --check
    flowrl eval unigenbench --prompts CSV_OR_DATASET --generate RUN_DIR_OR_RECIPE --out DIR [...]
    flowrl eval unigenbench --prompts CSV_OR_DATASET --judge IMAGE_DIR --out DIR
                            (--base-url URL --judge-model NAME | --judge-model LOCAL_OR_HUB) [--resume]
                            [--protocol official --official-dir UNIGENBENCH_CHECKOUT | --protocol lenient]
    flowrl eval unigenbench --prompts CSV_OR_DATASET --summary OUT_DIR
    flowrl eval checkpoint --base HUB_ID_OR_FOLDER_OR_RECIPE (--lora PATH | --run RUN_OR_CHECKPOINT)
                           --benchmarks geneval,ocr,drawbench --out DIR [--preset P] [...]
                           (benchmarks.checkpoint_eval.cli)

``--generate`` runs under ``accelerate launch`` too (each process draws its share of the prompts). A file that
exists already is never written over without ``--force`` (``--generate`` adds the missing images of a folder
made with the same settings; ``unigenbench --judge`` continues one with ``--resume``). Each
command returns an exit code; bad input raises ValueError / RuntimeError with a one-line message.
Also runnable alone: ``python -m flowrl.benchmarks.cli eval ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from flowrl.benchmarks.commands import add_judged_steps, print_main, require_out

# ---------------------------------------------------------------------------------------------- geneval


def cmd_geneval(args: argparse.Namespace) -> int:
    if args.overrides and not args.generate:
        raise ValueError(f"key=value overrides ({args.overrides[0]}, ...) apply to --generate only")
    if args.force and args.generate:
        raise ValueError("--force applies to --write-prompts, --score and --summary (--generate adds missing images)")
    if args.write_prompts:
        return _geneval_prompts(args)
    if args.generate:
        return _geneval_generate(args)
    if args.score:
        return _geneval_score(args)
    return _geneval_summary(args)


def _geneval_prompts(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.geneval.prompts import write_prompts
    from flowrl.commands import refuse_overwrite

    refuse_overwrite([args.write_prompts], "--write-prompts", args.force)
    if args.prompts_txt is not None:
        refuse_overwrite([args.prompts_txt], "--prompts-txt", args.force)
    path = write_prompts(args.write_prompts, prompts_txt=args.prompts_txt)
    print(f"wrote {path}")
    return 0


def _refuse_results(out: Path, names: tuple[str, ...], force: bool) -> None:
    """``--out DIR`` holding results of an earlier run: refused, naming the file, unless ``--force``."""
    from flowrl.commands import refuse_overwrite

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {str(out)!r} is a file; expected a folder")
    refuse_overwrite([out / name for name in names], "--out", force)


def _geneval_generate(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.geneval.generate import generate_geneval

    out = require_out(args, "--generate")
    record = generate_geneval(
        args.generate,
        out,
        overrides=args.overrides,
        metadata=args.metadata,
        images_per_prompt=args.images_per_prompt,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        batch_size=args.batch_size,
        negative_prompt=args.negative_prompt,
    )
    s = record["settings"]
    print_main(
        f"wrote {record['images']} images for {record['prompts']} prompts to {out} ({s['steps']} steps, guidance "
        f"{s['guidance_scale']:g}, seed {s['seed']}, weights: {record['model']['trained_weights'] or 'base'}); "
        f"score with: flowrl eval geneval --score {out} --out DIR"
    )
    return 0


def _geneval_score(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.geneval.detect import ClipColorClassifier, QueryInstanceDetector
    from flowrl.benchmarks.geneval.rules import RuleConfig
    from flowrl.benchmarks.geneval.scoring import score_folder, summary_markdown

    out = require_out(args, "--score")
    rules = RuleConfig.from_options(args.option)
    if not Path(args.score).is_dir():
        raise FileNotFoundError(f"GenEval image folder {args.score} does not exist")
    _refuse_results(out, ("results.jsonl", "summary.json", "summary.md"), args.force)
    floor = min(rules.threshold, rules.counting_threshold)
    detector = QueryInstanceDetector.from_pretrained(args.detector, device=args.device, min_score=floor)
    colors = ClipColorClassifier.from_pretrained(args.clip_arch, args.clip_pretrained, device=args.device)
    _, summary = score_folder(args.score, detector, colors, rules, out_dir=out, batch_size=args.batch_size or 8)
    print(summary_markdown(summary), end="")
    print(f"wrote {out / 'results.jsonl'}, {out / 'summary.json'}, {out / 'summary.md'}")
    return 0


def _geneval_summary(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.geneval.scoring import load_results, summarize, summary_markdown, write_summary

    path = Path(args.summary)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"GenEval results file {path} does not exist")
    if args.out:
        _refuse_results(Path(args.out), ("summary.json", "summary.md"), args.force)
    summary = summarize(load_results(path))
    if args.out:
        write_summary(summary, args.out)
    print(summary_markdown(summary) if not args.json else json.dumps(summary, indent=2), end="")
    return 0


def _add_generation_options(p: argparse.ArgumentParser, images_default: int = 4) -> None:
    g = p.add_argument_group("generation (--generate)")
    g.add_argument("--images-per-prompt", type=int, default=images_default, help=f"default {images_default}")
    g.add_argument("--steps", type=int, default=None, help="default: the run's sample.eval_num_steps")
    g.add_argument("--guidance", type=float, default=None, help="default: the run's sample.eval_guidance_scale")
    g.add_argument("--seed", type=int, default=42, help="image k of prompt i uses seed + i * n + k (default 42)")
    g.add_argument(
        "--batch-size", type=int, default=None, help="images per call: pipeline per process, detector, local judge"
    )
    g.add_argument("--negative-prompt", default=None)
    g.add_argument("overrides", nargs="*", help="key=value config overrides for --generate (e.g. model.dtype=bf16)")


def _add_geneval(sub: Any) -> None:
    from flowrl.benchmarks.geneval.detect import DEFAULT_CLIP_ARCH, DEFAULT_CLIP_PRETRAINED, DEFAULT_DETECTOR

    p = sub.add_parser(
        "geneval",
        help="GenEval: prompt file, generation in GenEval's layout, scoring, summary",
        description="GenEval (6 tasks, 553 prompts): write the prompt file, draw images with a run's weights, "
        "score an image folder with Mask2Former + CLIP, or summarise a results.jsonl.",
    )
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--write-prompts", metavar="FILE", help="write the official evaluation_metadata.jsonl")
    act.add_argument("--generate", metavar="RUN_OR_RECIPE", help="draw images with a run folder's weights or a recipe")
    act.add_argument("--score", metavar="IMAGE_DIR", help="score a folder in GenEval's layout")
    act.add_argument("--summary", metavar="RESULTS", help="summarise a results.jsonl (ours or GenEval's) or its folder")
    p.add_argument("--out", default=None, help="output folder (images for --generate, results for --score)")
    p.add_argument("--prompts-txt", default=None, help="with --write-prompts: also write the plain prompt list")
    p.add_argument(
        "--force", action="store_true",
        help="replace files that --write-prompts, --prompts-txt, or --out of --score / --summary would write over",
    )  # fmt: skip
    p.add_argument("--metadata", default=None, help="with --generate: a metadata JSONL (default: the official 553)")
    _add_generation_options(p)
    s = p.add_argument_group("scoring (--score)")
    s.add_argument("--detector", default=DEFAULT_DETECTOR, help="transformers Mask2Former id or local folder")
    s.add_argument("--clip-arch", default=DEFAULT_CLIP_ARCH)
    s.add_argument("--clip-pretrained", default=DEFAULT_CLIP_PRETRAINED, help="open_clip tag or local weights file")
    s.add_argument("--device", default=None, help="default: cuda when available")
    s.add_argument("--option", action="append", default=[], help="rule option key=value (threshold=0.3, ...)")
    p.add_argument("--json", action="store_true", help="with --summary: print JSON instead of Markdown")
    p.set_defaults(fn=cmd_geneval)


# ------------------------------------------------------------------------------------------ unigenbench


def _unigenbench_options(args: argparse.Namespace) -> None:
    """One-line errors for protocol options that do not fit together."""
    from flowrl.benchmarks.unigenbench.official import REQUEST_STYLES

    if args.protocol not in ("official", "lenient"):
        raise ValueError(f"--protocol {args.protocol!r}: choose official (UniGenBench's own rules) or lenient")
    if args.request_style not in REQUEST_STYLES:
        raise ValueError(f"--request-style {args.request_style!r}: choose one of {', '.join(REQUEST_STYLES)}")
    if args.attempts is not None and args.attempts < 1:
        raise ValueError(f"--attempts: must be at least 1, got {args.attempts}")
    if args.protocol == "official" and args.template:
        raise ValueError(
            "--template applies to --protocol lenient; the official protocol reads its template from --official-dir"
        )
    if args.official_dir is None:
        import os

        args.official_dir = os.environ.get("UNIGENBENCH_DIR") or None


def cmd_unigenbench(args: argparse.Namespace) -> int:
    from flowrl.benchmarks.unigenbench.data import load_prompts
    from flowrl.benchmarks.unigenbench.official import CSV_NAMES, official_csv

    if args.overrides and not args.generate:
        raise ValueError(f"key=value overrides ({args.overrides[0]}, ...) apply to --generate only")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit: must be at least 1, got {args.limit}")
    _unigenbench_options(args)
    source = official_csv(args.official_dir, args.prompts) if args.prompts in CSV_NAMES else args.prompts
    prompts = load_prompts(source, split=args.split)
    if args.check:
        if args.protocol == "official" and args.official_dir:
            from flowrl.benchmarks.unigenbench.official import check_testpoints, load_protocol

            check_testpoints(load_protocol(args.official_dir, prompts.language), prompts.cases)
        return _unigenbench_check(prompts)
    if args.generate:
        return _unigenbench_generate(args, prompts)
    if args.judge:
        return _unigenbench_judge(args, prompts)
    return _unigenbench_summary(args, prompts)


def _unigenbench_check(prompts: Any) -> int:
    d = prompts.describe()
    print(
        f"{d['source']}: {d['rows']} rows ({d['language']}), {d['valid_rows']} valid with {d['testpoints']} "
        f"testpoints, {len(prompts.invalid)} invalid"
    )
    for row in prompts.invalid:
        print(f"  line {row.line} (index {row.index}): {row.reason}")
    from flowrl.benchmarks.unigenbench.official import file_version, version_label

    if Path(prompts.source).is_file():
        print(f"  CSV version: {version_label(file_version(prompts.source))}")
    return 0 if not prompts.invalid else 1


def _unigenbench_generate(args: argparse.Namespace, prompts: Any) -> int:
    from flowrl.benchmarks.unigenbench.generate import generate_unigenbench

    out = require_out(args, "--generate")
    record = generate_unigenbench(
        args.generate,
        prompts,
        out,
        overrides=args.overrides,
        images_per_prompt=args.images_per_prompt,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        batch_size=args.batch_size,
        negative_prompt=args.negative_prompt,
        limit=args.limit,
    )
    drawn = record.get("prompt_set", {}).get("invalid_rows_drawn") or []
    skipped = (
        f"; {len(prompts.invalid)} invalid prompt rows ({len(drawn)} of them drawn anyway for the official scorer, "
        "unscored here)"
        if prompts.invalid and args.limit is None
        else f"; {len(prompts.invalid)} invalid prompt rows skipped"
        if prompts.invalid
        else ""
    )
    print_main(f"wrote {record['images']} images for {record['prompts']} prompts to {out}{skipped}")
    return 0


def _build_judge(args: argparse.Namespace) -> Any:
    from flowrl.benchmarks.unigenbench.judge import openai_judge, transformers_judge

    if not args.judge_model:
        raise ValueError("--judge needs --judge-model (the served model name with --base-url, else a local model)")
    if args.base_url:
        return openai_judge(
            args.base_url,
            args.judge_model,
            version=args.judge_version,
            api_key=args.api_key,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
            retries=args.retries,
            concurrency=args.concurrency,
            official_style=args.request_style if args.protocol == "official" else None,
        )
    return transformers_judge(
        args.judge_model,
        version=args.judge_version,
        max_tokens=args.max_tokens,
        device=args.device,
        dtype=args.judge_dtype,
        batch_size=args.batch_size or 4,
    )


def _unigenbench_judge(args: argparse.Namespace, prompts: Any) -> int:
    from flowrl.benchmarks.unigenbench.evaluate import evaluate_folder
    from flowrl.benchmarks.unigenbench.judge import load_template
    from flowrl.benchmarks.unigenbench.official import load_protocol
    from flowrl.benchmarks.unigenbench.scoring import summary_markdown

    out = require_out(args, "--judge")
    if not Path(args.judge).is_dir():
        raise FileNotFoundError(f"UniGenBench image folder {args.judge} does not exist")
    if args.protocol == "official":
        template: Any = load_protocol(args.official_dir, prompts.language)
    else:
        template = load_template(args.template, prompts.language)
    judge = _build_judge(args)
    summary = evaluate_folder(
        prompts,
        args.judge,
        out,
        judge,
        template,
        images_per_prompt=args.images_per_prompt,
        attempts=args.attempts,
        resume=args.resume,
        limit=args.limit,
    )
    print(summary_markdown(summary), end="")
    print(f"wrote {out / 'summary.json'}, {out / 'summary.md'} and {out / 'progress.jsonl'}")
    return 0


def _unigenbench_summary(args: argparse.Namespace, prompts: Any) -> int:
    from flowrl.benchmarks.unigenbench.evaluate import summarize_run
    from flowrl.benchmarks.unigenbench.scoring import summary_markdown

    summary = summarize_run(args.summary, prompts)
    print(summary_markdown(summary) if not args.json else json.dumps(summary, indent=2, ensure_ascii=False), end="")
    return 0


def _add_unigenbench(sub: Any) -> None:
    p = sub.add_parser(
        "unigenbench",
        help="UniGenBench: check prompts, generate, judge with an MLLM, summarise",
        description="UniGenBench (600 prompts, 27 sub-dimensions in 10 primary dimensions): check the prompt "
        "CSV, draw images with a run's weights, judge an image folder ({index}_{k}.png) with an "
        "OpenAI-compatible endpoint or a local model, or re-aggregate a results folder.",
    )
    p.add_argument(
        "--prompts",
        required=True,
        help="official prompt CSV; en | en_long | zh | zh_long for the CSV of --official-dir; or a datasets "
        "name (hf:owner/name)",
    )
    p.add_argument("--split", default="test", help="dataset split when --prompts names a dataset (default test)")
    add_judged_steps(
        p,
        check="validate the prompt rows and report the invalid ones",
        generate="draw images with a run folder's weights or a recipe",
        judge="judge a folder of {index}_{k}.png images",
        limit="only the first N valid prompts (smoke runs)",
    )
    _add_generation_options(p)
    j = p.add_argument_group("judge (--judge)")
    j.add_argument(
        "--protocol",
        default="official",
        help="official (default: UniGenBench's template, definitions, parse and scoring rules, 11 attempts, its "
        "requests; needs --official-dir) | lenient (flowrl's template and forgiving parser; not comparable)",
    )
    j.add_argument(
        "--official-dir",
        default=None,
        help="a checkout of github.com/CodeGoat24/UniGenBench (default: $UNIGENBENCH_DIR); its template and "
        "definitions are read from it, its version recorded",
    )
    j.add_argument(
        "--request-style",
        default="vllm",
        help="official requests: vllm (image first, JPEG q95, do_sample false) | gemini (text first, the file)",
    )
    j.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1")
    j.add_argument("--judge-model", default=None, help="served model name, or a local / hub model for transformers")
    j.add_argument("--judge-version", default=None, help="version to pin in the results (hub commit, API version)")
    j.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    j.add_argument(
        "--template", default=None, help="lenient only: judge prompt template file (fields {prompt} {checkpoints} ...)"
    )
    j.add_argument("--max-tokens", type=int, default=4096)
    j.add_argument(
        "--attempts",
        type=int,
        default=None,
        help="asks per image while the reply does not parse (official 11, lenient 3)",
    )
    j.add_argument("--timeout", type=float, default=600.0, help="seconds per call")
    j.add_argument(
        "--retries",
        type=int,
        default=None,
        help="retries per failed call (backoff doubling from 2 s; default 9 official, i.e. the official "
        "client's 10 tries, 3 lenient)",
    )
    j.add_argument("--concurrency", type=int, default=8, help="calls in flight to the endpoint")
    j.add_argument("--judge-dtype", default="bf16", help="local judge weights: fp32 | fp16 | bf16")
    j.add_argument("--device", default=None, help="local judge device (default: cuda when available)")
    j.add_argument("--resume", action="store_true", help="continue an interrupted --judge run in --out")
    p.add_argument("--json", action="store_true", help="with --summary: print JSON instead of Markdown")
    p.set_defaults(fn=cmd_unigenbench)


# ------------------------------------------------------------------------------------ cached base models

# ------------------------------------------------------------------------------------------------ hook


def add_commands(subparsers: Any) -> None:
    """Register ``eval`` with its benchmark subcommands on an argparse subparsers object (``fn`` defaults)."""
    p = subparsers.add_parser(
        "eval",
        help="benchmarks: geneval, geneval2, dpg, unigenbench, checkpoint (base beside checkpoint), toy, toy-av",
        description="Run a benchmark.",
    )
    sub = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    _add_geneval(sub)
    _add_unigenbench(sub)
    from flowrl.benchmarks.dpgbench.cli import add_command as _add_dpg
    from flowrl.benchmarks.geneval2.cli import add_command as _add_geneval2

    _add_geneval2(sub)
    _add_dpg(sub)
    from flowrl.benchmarks.toy.cli import add_command as _add_toy
    from flowrl.benchmarks.toy_av.cli import add_command as _add_toy_av

    _add_toy(sub)
    _add_toy_av(sub)
    from flowrl.benchmarks.checkpoint_eval.cli import add_command as _add_checkpoint

    _add_checkpoint(sub)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowrl-eval", description="flowrl benchmark commands")
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from flowrl.commands import error_line

    try:
        return args.fn(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
