#!/usr/bin/python3
"""Write scikit-learn's 8x8 handwritten digits as NumPy arrays for `dlcc train`.

Run with /usr/bin/python3: Debian's numpy and scikit-learn (python3-sklearn; the data set ships
with scikit-learn, nothing is downloaded).

usage: /usr/bin/python3 examples/digits/make_data.py OUTDIR

Writes OUTDIR/X.npy (float32 [1797, 1, 8, 8], pixels scaled from 0..16 to [0, 1]) and
OUTDIR/Y.npy (int64 [1797], the digit). The rows are shuffled once with a fixed seed: the file is
ordered by writer, so without it the last 10% (what `dlcc train --val-split 0.1` holds out) would
be a few writers the model never saw, not a fair validation set.
"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    os.makedirs(sys.argv[1], exist_ok=True)
    np.save(os.path.join(sys.argv[1], "X.npy"), x[order])
    np.save(os.path.join(sys.argv[1], "Y.npy"), y[order])
    print("wrote %d digits to %s (X %s float32, Y int64)" % (len(y), sys.argv[1], x.shape))


if __name__ == "__main__":
    main()
