#!/usr/bin/env python3
"""The device check's dry run (ctest gpu_check.dry_run), on a machine without a GPU.

scripts/gpu_check.sh --plan gives the stage table; this checks it against what the GPU machine
allows, then runs the script here (every GPU stage fails fast and must still leave its line):

  - the number of stages, and their order's ends (environment first, the sanitizer last);
  - the sum of the stage limits (at most --max-limit-sum, and within the script's own budget);
  - the files written to OUT (results.jsonl and the declared gtest JSON files: at most
    --max-files, plain names, directly in OUT), and that no command writes an undeclared one;
  - that every program a stage runs is in the bundle (or the device's own: bash,
    compute-sanitizer), every bundle path it names exists, every flag it passes is in that
    program's --help, and every gtest filter pattern matches a test of that binary;
  - the run: one results.jsonl line per stage in the planned order with its fields, no file in
    OUT that was not declared, the logs outside OUT; and with GPU_CHECK_BUDGET_S=0 every stage
    is recorded as skipped.

Exits 0 with "gpu_check dry run: OK ..." or 1 with each violation.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

DEVICE_PROGRAMS = {"bash", "compute-sanitizer"}  # the device's own, not in the bundle
NAME = re.compile(r"^[A-Za-z0-9._-]+$")
errors = []


def fail(message):
    errors.append(message)


def strip_env(argv):
    """The command after `env [-u NAME] [NAME=VALUE]...`, and the environment it sets."""
    if not argv or argv[0] != "env":
        return argv, {}
    i, env = 1, {}
    while i < len(argv):
        if argv[i] == "-u" and i + 1 < len(argv):
            i += 2
        elif "=" in argv[i] and not argv[i].startswith("-"):
            key, value = argv[i].split("=", 1)
            env[key] = value
            i += 1
        else:
            break
    return argv[i:], env


def run(argv, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", env=full_env,
                          timeout=timeout)


help_cache = {}


def help_text(program, subcommand, env):
    key = (program, subcommand)
    if key not in help_cache:
        argv = [program] + ([subcommand] if subcommand else []) + ["--help"]
        result = run(argv, env)
        help_cache[key] = result.stdout + result.stderr
        if result.returncode != 0:
            fail(f"{' '.join(argv)} exits {result.returncode}: {help_cache[key][-300:]}")
    return help_cache[key]


def flags_of(args):
    """The option names in args (--name, --name=value, -x), not their values."""
    for arg in args:
        if arg.startswith("--"):
            yield arg.split("=", 1)[0]
        elif re.fullmatch(r"-[A-Za-z]", arg):
            yield arg


def check_gtest(binary, args, env, out_dir, stage):
    tests = None
    for arg in args:
        if arg.startswith("--gtest_filter="):
            listing = run([binary, "--gtest_list_tests"], env).stdout
            tests, suite = [], ""
            for line in listing.splitlines():
                if not line.startswith(" ") and line.endswith("."):
                    suite = line
                elif line.startswith("  ") and suite:
                    tests.append(suite + line.strip().split()[0])
            for pattern in arg.split("=", 1)[1].split(":"):
                regex = re.compile("^" + re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + "$")
                if not any(regex.match(t) for t in tests):
                    fail(f"{stage}: --gtest_filter pattern '{pattern}' matches no test of {os.path.basename(binary)}")
        elif arg.startswith("--gtest_output="):
            if not arg.startswith(f"--gtest_output=json:{out_dir}/"):
                fail(f"{stage}: {arg} is not a JSON file in OUT")
        elif arg.startswith("--gtest_"):
            pass
        elif arg.startswith("-"):
            fail(f"{stage}: {arg} is not a gtest flag")


def check_command(stage, argv, bundle, out_dir):
    command, env = strip_env(argv)
    if not command:
        fail(f"{stage}: an empty command")
        return
    program = command[0]
    if os.path.basename(program) in DEVICE_PROGRAMS and not program.startswith(bundle):
        # The device's program; what it runs of ours follows (compute-sanitizer's target).
        targets = [i for i, a in enumerate(command) if a.startswith(bundle + "/")]
        if os.path.basename(program) == "compute-sanitizer":
            if not targets:
                fail(f"{stage}: compute-sanitizer runs nothing from the bundle")
                return
            options = command[1:targets[0]]
            if not {"--tool"} <= set(flags_of(options)):
                fail(f"{stage}: compute-sanitizer without --tool")
            command = command[targets[0]:]
            program = command[0]
        else:
            return
    if not program.startswith(bundle + "/"):
        fail(f"{stage}: {program} is neither in the bundle nor one of the device's programs {sorted(DEVICE_PROGRAMS)}")
        return
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        fail(f"{stage}: {program} is missing from the bundle (or not executable)")
        return
    for arg in command[1:]:
        for path in re.findall(re.escape(bundle) + r"/[^\s:=]+", arg):
            if not os.path.exists(path):
                fail(f"{stage}: {path} is missing from the bundle")
    for key, value in env.items():
        for path in value.split(":"):
            if path.startswith(bundle + "/") and not os.path.exists(path):
                fail(f"{stage}: {key}={path} is missing from the bundle")
    name = os.path.basename(program)
    args = command[1:]
    if name.endswith("_test"):
        check_gtest(program, args, env, out_dir, stage)
        return
    subcommand = args[0] if name == "tpserve" and args and not args[0].startswith("-") else None
    if name == "tpserve" and subcommand is None:
        fail(f"{stage}: tpserve without a subcommand")
        return
    text = help_text(program, subcommand, env)
    for flag in flags_of(args[1:] if subcommand else args):
        if not re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", text):
            fail(f"{stage}: {name}{' ' + subcommand if subcommand else ''} has no {flag} (not in its --help)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--work", required=True, help="folder for OUT and the logs (emptied)")
    parser.add_argument("--stages", type=int, required=True)
    parser.add_argument("--max-files", type=int, default=8)
    parser.add_argument("--max-limit-sum", type=int, default=360)
    parser.add_argument("--plan-only", action="store_true", help="skip the two runs")
    args = parser.parse_args()
    bundle = os.path.abspath(args.bundle)
    work = os.path.abspath(args.work)
    out_dir = os.path.join(work, "out")
    logs = os.path.join(work, "logs")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, GPU_BUNDLE=bundle, GPU_CHECK_LOGS=logs)
    env.pop("GPU_CHECK_BUDGET_S", None)

    # The plan.
    plan = subprocess.run([args.script, "--plan", out_dir], capture_output=True, text=True, env=env)
    if plan.returncode != 0:
        print(f"gpu_check dry run: FAILED: --plan exits {plan.returncode}: {plan.stderr[-2000:]}")
        return 1
    lines = [json.loads(line) for line in plan.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines and lines[-1].get("summary") else None
    stages = [line for line in lines if not line.get("summary")]
    if summary is None:
        fail("--plan printed no summary line")
        summary = {"budget_s": 0, "out_files": [], "limit_sum_s": -1, "stages": -1}
    names = [s["stage"] for s in stages]
    if len(stages) != args.stages:
        fail(f"{len(stages)} stages, expected {args.stages}: {names}")
    if len(set(names)) != len(names):
        fail(f"stage names repeat: {names}")
    if names and names[0] != "environment":
        fail(f"the first stage is {names[0]}, not environment")
    if names and not names[-1].startswith("sanitizer"):
        fail(f"the last stage is {names[-1]}, not the compute-sanitizer's")
    for name in names:
        if not NAME.match(name):
            fail(f"stage name '{name}' is not letters, digits, '.', '_', '-'")
    limits = [s["limit_s"] for s in stages]
    limit_sum = sum(limits)
    if any(limit <= 0 for limit in limits):
        fail(f"a limit is not positive: {dict(zip(names, limits))}")
    if limit_sum > args.max_limit_sum:
        fail(f"the stage limits add up to {limit_sum} s, over {args.max_limit_sum} s: {dict(zip(names, limits))}")
    if limit_sum > summary["budget_s"]:
        fail(f"the stage limits add up to {limit_sum} s, over the script's budget of {summary['budget_s']} s")
    if summary["budget_s"] > args.max_limit_sum:
        fail(f"the script's budget of {summary['budget_s']} s is over {args.max_limit_sum} s")
    if summary["limit_sum_s"] != limit_sum or summary["stages"] != len(stages):
        fail(f"the summary line {summary} disagrees with the stage lines")
    declared = ["results.jsonl"] + [o for s in stages for o in s["outputs"]]
    if summary["out_files"] != declared:
        fail(f"the summary's files {summary['out_files']} are not the stages' {declared}")
    if len(set(declared)) != len(declared):
        fail(f"files to OUT repeat: {declared}")
    if len(declared) > args.max_files:
        fail(f"{len(declared)} files to OUT, over {args.max_files}: {declared}")
    for name in declared:
        if not NAME.match(name):
            fail(f"file to OUT '{name}' is not a plain name")
    for s in stages:
        written = set()
        for command in s["commands"]:
            for arg in command:
                for path in re.findall(re.escape(out_dir) + r"/[^\s:=]+", arg):
                    written.add(os.path.relpath(path, out_dir))
            check_command(s["stage"], command, bundle, out_dir)
        if written != set(s["outputs"]):
            fail(f"{s['stage']}: writes {sorted(written)} to OUT but declares {s['outputs']}")

    # The run, and the run with no budget left.
    if not args.plan_only and not errors:
        result = subprocess.run([args.script, out_dir], capture_output=True, text=True, errors="replace", env=env)
        results_path = os.path.join(out_dir, "results.jsonl")
        got = [json.loads(line) for line in open(results_path)] if os.path.exists(results_path) else []
        if [g["stage"] for g in got] != names:
            fail(f"results.jsonl has stages {[g['stage'] for g in got]}, planned {names}\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
        for g in got:
            missing = {"stage", "index", "limit_s", "rc", "timed_out", "skipped", "seconds", "commands", "tail"} - set(g)
            if missing:
                fail(f"{g.get('stage')}: results.jsonl line lacks {sorted(missing)}")
            if g.get("skipped"):
                fail(f"{g['stage']}: skipped in a full-budget run: {g['skipped']}")
            if g.get("rc") is None:
                fail(f"{g['stage']}: no rc")
        if got and "MISSING" not in got[0]["tail"] and "environment: complete" not in got[0]["tail"]:
            fail(f"environment's tail says neither MISSING nor complete: {got[0]['tail'][-500:]}")
        present = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
        if set(present) - set(declared):
            fail(f"OUT holds undeclared files: {sorted(set(present) - set(declared))}")
        if len(present) > args.max_files:
            fail(f"OUT holds {len(present)} files, over {args.max_files}")
        if not os.path.isfile(os.path.join(logs, "environment.log")):
            fail(f"no environment.log in the logs folder {logs}")

        skipped_out = os.path.join(work, "out-no-budget")
        subprocess.run([args.script, skipped_out], capture_output=True, text=True,
                       env=dict(env, GPU_CHECK_BUDGET_S="0"))
        skipped = [json.loads(line) for line in open(os.path.join(skipped_out, "results.jsonl"))]
        if [g["stage"] for g in skipped] != names or not all(g["skipped"] and g["rc"] is None for g in skipped):
            fail(f"with GPU_CHECK_BUDGET_S=0 not every stage was recorded as skipped: {[(g['stage'], g['skipped']) for g in skipped]}")
        if sorted(os.listdir(skipped_out)) != ["results.jsonl"]:
            fail(f"with no budget OUT holds {sorted(os.listdir(skipped_out))}")

    if errors:
        for e in errors:
            print(f"gpu_check dry run: FAILED: {e}")
        return 1
    print(f"gpu_check dry run: OK: {len(stages)} stages, limits sum to {limit_sum} s (budget {summary['budget_s']} s, "
          f"at most {args.max_limit_sum} s), {len(declared)} files to OUT (at most {args.max_files}): "
          + ", ".join(f"{n} {l}" for n, l in zip(names, limits)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
