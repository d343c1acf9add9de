"""A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default settings).

The same rules as memplan's C++ model (torch_allocator/caching_model.hpp), over a whole run of steps instead of one
steady-state step: requests are rounded to 512 bytes; requests up to 1 MiB come from the small pool (2 MiB
segments), larger ones from the large pool (20 MiB segments for requests under 10 MiB, else their own segment
rounded up to 2 MiB); the smallest free block that fits is taken (lowest address among equals) and split when the
rest is at least 512 bytes (small pool) or above 1 MiB (large pool), so an unsplit block counts whole as allocated;
freed blocks merge with free neighbours of their segment; segments are never given back (no empty_cache).
"""
import bisect

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(n):
    return MIN_BLOCK if n < MIN_BLOCK else MIN_BLOCK * ((n + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(n):
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((n + ROUND_LARGE - 1) // ROUND_LARGE)


class _Block:
    __slots__ = ("addr", "size", "free", "prev", "next", "small")

    def __init__(self, addr, size, small):
        self.addr, self.size, self.small = addr, size, small
        self.free, self.prev, self.next = True, None, None


class CachingAllocator:
    """alloc(nbytes) -> handle, free(handle); allocated, reserved and their peaks as PyTorch's stats count them."""

    def __init__(self):
        self._free = {True: [], False: []}  # pool (small?) -> sorted [(size, addr, block)]
        self._next_addr = 0
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.segments = 0

    def reset_peak(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def _insert(self, b):
        bisect.insort(self._free[b.small], (b.size, b.addr, b))

    def _remove(self, b):
        lst = self._free[b.small]
        i = bisect.bisect_left(lst, (b.size, b.addr))
        while lst[i][2] is not b:
            i += 1
        del lst[i]

    def alloc(self, nbytes):
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1))
        if i < len(lst):
            b = lst.pop(i)[2]
        else:
            seg = segment_size(size)
            b = _Block(self._next_addr, seg, small)
            self._next_addr += seg
            self.reserved += seg
            self.segments += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = b.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            r = _Block(b.addr + size, rest, small)
            r.prev, r.next = b, b.next
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = size
            self._insert(r)
        b.free = False
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return b

    def free(self, b):
        self.allocated -= b.size
        b.free = True
        for nb in (b.prev, b.next):
            if nb is not None and nb.free:
                self._remove(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        self._insert(b)
