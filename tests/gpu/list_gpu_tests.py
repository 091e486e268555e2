#!/usr/bin/env python3
"""Prints the programs behind the ctest tests labelled `gpu`, one per line,
relative to the build directory (each once, in ctest's order).

    list_gpu_tests.py BUILD_DIR

check.sh runs these programs whole instead of going through ctest, so that a
bundle built on another machine (bundle.sh), whose CTestTestfiles hold that
machine's absolute paths, is checked the same way as a local build.
"""
import json
import os
import subprocess
import sys


def main():
    build = os.path.realpath(sys.argv[1])
    listing = subprocess.run(
        ["ctest", "--test-dir", build, "-N", "-L", "gpu", "--show-only=json-v1"],
        capture_output=True, text=True, check=True)
    seen = []
    for test in json.loads(listing.stdout).get("tests", []):
        program = os.path.relpath(os.path.realpath(test["command"][0]), build)
        if program not in seen:
            seen.append(program)
    if not seen:
        sys.exit(f"no tests labelled gpu in {build}")
    print("\n".join(seen))


if __name__ == "__main__":
    main()
