#!/usr/bin/env python3
"""estimate_step against the GPU's measurements on half 1 of 2 of the zoo sample (tests/python/estimate_zoo_lib.py).
Exit 77 without torch or with another PyTorch than the one measured."""
import estimate_zoo_lib

estimate_zoo_lib.main(0, 2)
