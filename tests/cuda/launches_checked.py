#!/usr/bin/env python3
"""Every CUDA kernel launch in kernels/cuda/ is followed by LOOM_CUDA_LAUNCHED() (the launch
error check, and with LOOM_CUDA_SYNC_CHECK=1 the run's): a launch left unchecked would let a bad
configuration fail silently, or surface later at an unrelated call. Runs without a GPU.
  launches_checked.py SRC
A launch is `name<<<...>>>(...);` or a cudaLaunchKernel call (comments ignored); a check must follow it before the end of the enclosing
function (a line starting with '}'): a dtype switch may launch in several branches and check
once after them."""
import glob, os, re, sys

src = sys.argv[1]
bad, total = [], 0
for path in sorted(glob.glob(os.path.join(src, "kernels/cuda/*.cu")) + glob.glob(os.path.join(src, "kernels/cuda/*.cuh"))):
    text = open(path).read()
    # Block comments blanked (newlines kept, so line numbers stay), then line comments.
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    lines = [l.split("//")[0] for l in text.split("\n")]
    for i, line in enumerate(lines):
        if "<<<" not in line and not re.search(r"\bcudaLaunch(Cooperative)?Kernel(Ex)?\s*\(", line):
            continue
        total += 1
        j = i
        while j + 1 < len(lines) and ";" not in lines[j]:
            j += 1
        ok = False
        for k in range(j, len(lines)):
            if "LOOM_CUDA_LAUNCHED()" in lines[k]:
                ok = True
                break
            if lines[k].startswith("}"):  # the end of the enclosing function
                break
        if not ok:
            bad.append(f"{os.path.relpath(path, src)}:{i + 1}: {line.strip()}")
if total == 0:
    sys.exit("no kernel launches found under kernels/cuda: is SRC right?")
if bad:
    print("kernel launches without LOOM_CUDA_LAUNCHED() after them:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"{total} kernel launches, each checked")
