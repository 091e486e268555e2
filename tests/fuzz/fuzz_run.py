#!/usr/bin/env python3
"""Runs a fuzzing campaign over the libFuzzer targets of a fuzz build
(`make fuzz-run`; see README.md).

For each target `fuzz_<name>` found in BUILD/tests/fuzz (or named on the
command line), one after another, never two at once:
  1. runs it for SECONDS (or until RUNS executions, when given, whichever
     comes first) on a scratch corpus plus corpus/<name>/, with the
     target's dictionary and input size limit (OPTIONS below); artifacts
     (crash-*, leak-*, timeout-*, oom-*) go to BUILD/fuzz-run/<name>/;
  2. merges the scratch corpus into corpus/<name>/ (libFuzzer -merge=1
     keeps only the inputs that add coverage);
  3. prints one row: executions, executions per second, edges covered
     (libFuzzer's `cov:`), new corpus files, crashes.
Exits 1 when any target crashed (the artifacts' paths are printed; keep
each under crashes/<name>/ once understood) or did not report its stats.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Per target (by <name>): its dictionary and the largest input it is given.
OPTIONS = {
    "model_config": {"dict": "model_config.dict"},
    "safetensors": {"dict": "safetensors.dict"},
    "json_body": {"dict": "json.dict", "max_len": 8192},
    "json_tensor": {"dict": "json_tensor.dict"},
    "config_json": {"dict": "json.dict", "max_len": 4096},
    "tfs_request": {"dict": "json.dict", "max_len": 4096},
    "queue_log": {"max_len": 4096},
    "onnx_model": {"max_len": 65536},
}
ARTIFACT_PREFIXES = ("crash-", "leak-", "timeout-", "oom-")


def corpus_files(path):
    return [f for f in os.listdir(path) if not f.startswith(".")]


def run_target(binary, name, seconds, runs, work_root):
    """Fuzzes one target; returns its row of numbers (None where libFuzzer
    printed none) and the paths of the artifacts it left."""
    corpus = os.path.join(HERE, "corpus", name)
    os.makedirs(corpus, exist_ok=True)
    work = os.path.join(work_root, name)
    scratch = os.path.join(work, "scratch")
    artifacts = os.path.join(work, "artifacts")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(scratch)
    os.makedirs(artifacts)

    options = OPTIONS.get(name, {})
    flags = [f"-max_total_time={seconds}", "-print_final_stats=1",
             f"-artifact_prefix={artifacts}/"]
    if runs:
        flags.append(f"-runs={runs}")
    if "dict" in options:
        flags.append("-dict=" + os.path.join(HERE, options["dict"]))
    if "max_len" in options:
        flags.append(f"-max_len={options['max_len']}")
    log_path = os.path.join(work, "fuzz.log")
    with open(log_path, "w") as log:
        subprocess.run([binary, scratch, corpus] + flags, stdout=log,
                       stderr=subprocess.STDOUT, cwd=work, check=False)
    with open(log_path, errors="replace") as log:
        text = log.read()

    def stat(key):
        m = re.search(r"^stat::%s:\s+(\d+)" % key, text, re.M)
        return int(m.group(1)) if m else None

    edges = re.findall(r"^#\d+\s+\w+\s+cov: (\d+)", text, re.M)
    before = len(corpus_files(corpus))
    merge_flags = [f for f in flags if f.startswith("-max_len=")]
    with open(os.path.join(work, "merge.log"), "w") as log:
        subprocess.run([binary, "-merge=1", corpus, scratch] + merge_flags,
                       stdout=log, stderr=subprocess.STDOUT, cwd=work,
                       check=False)
    found = sorted(os.path.join(artifacts, f) for f in os.listdir(artifacts)
                   if f.startswith(ARTIFACT_PREFIXES))
    row = {
        "executions": stat("number_of_executed_units"),
        "exec/s": stat("average_exec_per_sec"),
        "edges": int(edges[-1]) if edges else None,
        "new files": len(corpus_files(corpus)) - before,
        "crashes": len(found),
    }
    return row, found, log_path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build-fuzz",
                        help="the fuzz build folder (make fuzz)")
    parser.add_argument("--seconds", type=int, default=60,
                        help="fuzzing time per target")
    parser.add_argument("--runs", type=int, default=0,
                        help="stop a target after this many executions "
                        "(a campaign's 10^7) if SECONDS has not passed")
    parser.add_argument("targets", nargs="*",
                        help="fuzz_<name> targets (default: all built)")
    args = parser.parse_args()

    bin_dir = os.path.join(args.build, "tests", "fuzz")
    targets = args.targets or sorted(
        f for f in os.listdir(bin_dir)
        if f.startswith("fuzz_") and not f.endswith("_replay")
        and os.access(os.path.join(bin_dir, f), os.X_OK)
        and os.path.isfile(os.path.join(bin_dir, f)))
    if not targets:
        sys.exit(f"no fuzz targets in {bin_dir}: run `make fuzz` first")
    work_root = os.path.abspath(os.path.join(args.build, "fuzz-run"))

    columns = ["executions", "exec/s", "edges", "new files", "crashes"]
    print(f"{'target':<20}" + "".join(f"{c:>12}" for c in columns),
          flush=True)
    failed = []
    for target in targets:
        name = target[len("fuzz_"):]
        row, found, log_path = run_target(
            os.path.abspath(os.path.join(bin_dir, target)), name,
            args.seconds, args.runs, work_root)
        cells = ["-" if row[c] is None else str(row[c]) for c in columns]
        print(f"{target:<20}" + "".join(f"{c:>12}" for c in cells),
              flush=True)
        if found or row["executions"] is None:
            failed.append((target, found, log_path))
    for target, found, log_path in failed:
        print(f"\n{target}: see {log_path}")
        for path in found:
            print(f"  {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
