"""stdout through attn's WholeWrites (render/out.py) against Python's own stdout stack, as a ratio
taken within one run, alternating the order:

    python benchmarks/stdout_writes.py

Both write the same ~19 MB of text to /dev/null, once as one write (how attn writes a document)
and once a write per line (how a program printing line by line would); each ratio is the median
of five rounds. WholeWrites turns a short write(2) (a full disk) into an error instead of losing
it; this shows what that costs (within the noise of a busy machine: 0.7-1.4 measured).
"""

import io
import os
import statistics
import time

from attncli.render import out

TEXT = ("0.123456789012345, " * 50 + "\n") * 20_000


def pythons() -> io.TextIOWrapper:
    """As the interpreter builds sys.stdout: text over a buffered writer over the descriptor."""
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.open(os.devnull, os.O_WRONLY), "w")), encoding="utf-8")


def attns() -> io.TextIOWrapper:
    return out.whole_stdout(pythons())


def seconds(make, pieces) -> float:
    stream = make()
    start = time.perf_counter()
    for piece in pieces:
        stream.write(piece)
    stream.flush()
    return time.perf_counter() - start


def main() -> None:
    for label, pieces in (("one write", [TEXT]), ("a write per line", TEXT.splitlines(True))):
        ratios = []
        for _ in range(5):
            ours = seconds(attns, pieces)  # A B B A: each side first and last in turn
            theirs = seconds(pythons, pieces) + seconds(pythons, pieces)
            ours += seconds(attns, pieces)
            ratios.append(ours / theirs)
        print(f"{label}: WholeWrites / Python's stdout = {statistics.median(ratios):.2f} "
              f"(median of 5 rounds; lowest {min(ratios):.2f}, highest {max(ratios):.2f})")


if __name__ == "__main__":
    main()
