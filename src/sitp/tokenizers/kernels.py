"""The numba loops of byte-pair encoding: training's pair counts and merges, and encoding.

Training (:func:`train_merges`) works on the distinct pre-split chunks of the corpus,
each a run of token ids in one flat array, with the number of times the chunk occurs.
It counts every adjacent pair once, weighted by those counts, and then, merge after
merge, touches only the chunks that hold the pair being merged:

* a hash table (open addressing, linear probing) maps a pair ``(a, b)`` to a pair
  number ``p``; per pair we keep its count and a linked list of the chunks it occurs in;
* a binary max-heap orders the pairs by count, ties broken by the smaller ``(a, b)``.
  The heap is lazy: a merge only lowers the counts of the pairs it breaks, and their
  heap entries are left as they are. When a stale entry comes to the top it is put
  back with its current count. The pairs a merge creates all hold the new token, so
  they are new, and each is pushed once with its final count.

Encoding (:func:`encode_pieces`) applies the merges to one chunk at a time the way
tiktoken does: among adjacent parts, join the pair whose join is the token of lowest
rank (the leftmost such pair on a tie), until no adjacent pair joins into a token.

Every function here is compiled with ``cache=True``; the pure-Python reference that the
tests hold these loops to is in ``tests/test_tokenizers.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1  # a free slot of the hash table
NO_RANK = np.iinfo(np.int32).max  # "these two parts do not join into a token"


# --8<-- [start:hash]
@njit(cache=True, inline="always")
def _key(a, b):
    """One int64 for the pair ``(a, b)``; ids are below 2**31."""
    return (np.int64(a) << 32) | np.int64(b)


@njit(cache=True, inline="always")
def _slot(table_keys, key):
    """The slot of ``key`` in the table, or the free slot where it would go."""
    mask = table_keys.shape[0] - 1  # the capacity is a power of two
    h = (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)  # Fibonacci hashing
    i = np.int64(h) & mask
    while table_keys[i] != key and table_keys[i] != EMPTY:
        i = (i + 1) & mask
    return i


# --8<-- [end:hash]


@njit(cache=True)
def _grown_table(table_keys, table_vals):
    """The same entries in a table twice the size."""
    keys = np.full(2 * table_keys.shape[0], EMPTY, np.int64)
    vals = np.empty(2 * table_keys.shape[0], np.int64)
    for i in range(table_keys.shape[0]):
        if table_keys[i] != EMPTY:
            j = _slot(keys, table_keys[i])
            keys[j] = table_keys[i]
            vals[j] = table_vals[i]
    return keys, vals


@njit(cache=True)
def _grown(array, size):
    """``array`` copied into a new one of ``size`` elements (``size`` >= its length)."""
    out = np.empty(size, array.dtype)
    out[: array.shape[0]] = array
    return out


# --8<-- [start:heap]
@njit(cache=True, inline="always")
def _before(count_i, p_i, count_j, p_j, pair_a, pair_b):
    """Does heap entry i come out before entry j? More counts first, then the smaller pair."""
    if count_i != count_j:
        return count_i > count_j
    if pair_a[p_i] != pair_a[p_j]:
        return pair_a[p_i] < pair_a[p_j]
    return pair_b[p_i] < pair_b[p_j]


@njit(cache=True)
def _heap_push(heap_count, heap_pair, n, count, p, pair_a, pair_b):
    """Adds (count, p) to the heap of ``n`` entries (the arrays have room); returns n + 1."""
    i = n
    while i > 0:
        parent = (i - 1) // 2
        if not _before(count, p, heap_count[parent], heap_pair[parent], pair_a, pair_b):
            break
        heap_count[i], heap_pair[i] = heap_count[parent], heap_pair[parent]
        i = parent
    heap_count[i], heap_pair[i] = count, p
    return n + 1


@njit(cache=True)
def _heap_pop(heap_count, heap_pair, n, pair_a, pair_b):
    """Removes the top of the heap of ``n`` entries (read it first); returns n - 1."""
    n -= 1
    count, p = heap_count[n], heap_pair[n]  # the last entry sinks from the top
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        right = child + 1
        if right < n and _before(
            heap_count[right], heap_pair[right], heap_count[child], heap_pair[child], pair_a, pair_b
        ):
            child = right
        if not _before(heap_count[child], heap_pair[child], count, p, pair_a, pair_b):
            break
        heap_count[i], heap_pair[i] = heap_count[child], heap_pair[child]
        i = child
    if n > 0:
        heap_count[i], heap_pair[i] = count, p
    return n


# --8<-- [end:heap]


@njit(cache=True)
def train_merges(ids, starts, lengths, counts, num_merges, first_id):
    """Learns up to ``num_merges`` merges from the chunks, in place.

    Args:
        ids: int32, every chunk's token ids back to back (its bytes, at the start);
            rewritten as the merges shorten the chunks.
        starts: int64, where chunk ``w`` begins in ``ids``.
        lengths: int64, its length now; rewritten.
        counts: int64, how many times chunk ``w`` occurs in the corpus.
        num_merges: how many merges to learn.
        first_id: the id of the first new token (256).

    Returns:
        ``merges``, an int32 array (k, 2): merge ``m`` joins ``merges[m]`` into token
        ``first_id + m``. ``k`` is less than ``num_merges`` only when no pair is left.
    """
    # --8<-- [start:count]
    # Pairs: the hash table maps key(a, b) -> p; per pair p its ids, count and chunk list.
    capacity = 1 << 16
    table_keys = np.full(capacity, EMPTY, np.int64)
    table_vals = np.empty(capacity, np.int64)
    pair_a = np.empty(capacity, np.int32)
    pair_b = np.empty(capacity, np.int32)
    pair_count = np.zeros(capacity, np.int64)
    pair_head = np.full(capacity, -1, np.int64)  # first entry of the pair's chunk list
    pair_last = np.full(capacity, -1, np.int64)  # the chunk added last (no duplicates)
    n_pairs = 0
    # The chunk lists' entries: entry e says "chunk entry_chunk[e]", then entry_next[e].
    entry_chunk = np.empty(capacity, np.int64)
    entry_next = np.empty(capacity, np.int64)
    n_entries = 0

    for w in range(starts.shape[0]):
        for i in range(starts[w], starts[w] + lengths[w] - 1):
            key = _key(ids[i], ids[i + 1])
            s = _slot(table_keys, key)
            if table_keys[s] == EMPTY:  # a pair seen for the first time
                if 2 * (n_pairs + 1) > table_keys.shape[0]:  # keep the table half empty
                    table_keys, table_vals = _grown_table(table_keys, table_vals)
                    s = _slot(table_keys, key)
                if n_pairs == pair_a.shape[0]:
                    size = 2 * n_pairs
                    pair_a, pair_b = _grown(pair_a, size), _grown(pair_b, size)
                    pair_count, pair_head = _grown(pair_count, size), _grown(pair_head, size)
                    pair_last = _grown(pair_last, size)
                table_keys[s], table_vals[s] = key, n_pairs
                pair_a[n_pairs], pair_b[n_pairs] = ids[i], ids[i + 1]
                pair_count[n_pairs], pair_head[n_pairs], pair_last[n_pairs] = 0, -1, -1
                n_pairs += 1
            p = table_vals[s]
            pair_count[p] += counts[w]
            if pair_last[p] != w:  # chunk w joins the pair's list
                if n_entries == entry_chunk.shape[0]:
                    entry_chunk = _grown(entry_chunk, 2 * n_entries)
                    entry_next = _grown(entry_next, 2 * n_entries)
                entry_chunk[n_entries], entry_next[n_entries] = w, pair_head[p]
                pair_head[p], pair_last[p] = n_entries, w
                n_entries += 1
    # --8<-- [end:count]

    heap_count = np.empty(max(n_pairs, 16), np.int64)
    heap_pair = np.empty(max(n_pairs, 16), np.int64)
    n_heap = 0
    for p in range(n_pairs):
        n_heap = _heap_push(heap_count, heap_pair, n_heap, pair_count[p], p, pair_a, pair_b)

    merges = np.empty((num_merges, 2), np.int32)
    fresh = np.empty(16, np.int64)  # the pairs the current merge creates
    for m in range(num_merges):
        # --8<-- [start:pick]
        best = -1
        while n_heap > 0:
            count, p = heap_count[0], heap_pair[0]
            n_heap = _heap_pop(heap_count, heap_pair, n_heap, pair_a, pair_b)
            if count == pair_count[p]:
                best = p  # an entry that is up to date: the most frequent pair
                break
            if pair_count[p] > 0:  # stale (a merge lowered it): back in, with its count now
                n_heap = _heap_push(heap_count, heap_pair, n_heap, pair_count[p], p, pair_a, pair_b)
        if best == -1 or pair_count[best] <= 0:
            return merges[:m]  # no pair left: every chunk is one token
        a, b, c = pair_a[best], pair_b[best], first_id + m
        merges[m, 0], merges[m, 1] = a, b
        # --8<-- [end:pick]
        n_fresh = 0
        e = pair_head[best]
        while e != -1:  # each chunk that held (a, b) when it was listed
            w = entry_chunk[e]
            e = entry_next[e]
            start, end = starts[w], starts[w] + lengths[w]
            holds = False
            for i in range(start, end - 1):
                if ids[i] == a and ids[i + 1] == b:
                    holds = True
                    break
            if not holds:  # an earlier merge took it apart
                continue
            # --8<-- [start:merge]
            # The chunk's pairs before the merge no longer count ...
            for i in range(start, end - 1):
                pair_count[table_vals[_slot(table_keys, _key(ids[i], ids[i + 1]))]] -= counts[w]
            # ... join each (a, b), left to right, in place ...
            j, i = start, start
            while i < end:
                if i + 1 < end and ids[i] == a and ids[i + 1] == b:
                    ids[j] = c
                    i += 2
                else:
                    ids[j] = ids[i]
                    i += 1
                j += 1
            end = j
            lengths[w] = end - start
            # ... and its pairs after the merge do; those that hold c are new.
            # --8<-- [end:merge]
            for i in range(start, end - 1):
                key = _key(ids[i], ids[i + 1])
                s = _slot(table_keys, key)
                if table_keys[s] == EMPTY:
                    if 2 * (n_pairs + 1) > table_keys.shape[0]:
                        table_keys, table_vals = _grown_table(table_keys, table_vals)
                        s = _slot(table_keys, key)
                    if n_pairs == pair_a.shape[0]:
                        size = 2 * n_pairs
                        pair_a, pair_b = _grown(pair_a, size), _grown(pair_b, size)
                        pair_count, pair_head = _grown(pair_count, size), _grown(pair_head, size)
                        pair_last = _grown(pair_last, size)
                    table_keys[s], table_vals[s] = key, n_pairs
                    pair_a[n_pairs], pair_b[n_pairs] = ids[i], ids[i + 1]
                    pair_count[n_pairs], pair_head[n_pairs], pair_last[n_pairs] = 0, -1, -1
                    if n_fresh == fresh.shape[0]:
                        fresh = _grown(fresh, 2 * n_fresh)
                    fresh[n_fresh] = n_pairs
                    n_fresh += 1
                    n_pairs += 1
                p = table_vals[s]
                pair_count[p] += counts[w]
                if (ids[i] == c or ids[i + 1] == c) and pair_last[p] != w:
                    if n_entries == entry_chunk.shape[0]:
                        entry_chunk = _grown(entry_chunk, 2 * n_entries)
                        entry_next = _grown(entry_next, 2 * n_entries)
                    entry_chunk[n_entries], entry_next[n_entries] = w, pair_head[p]
                    pair_head[p], pair_last[p] = n_entries, w
                    n_entries += 1
        pair_count[best] = 0
        if n_heap + n_fresh > heap_count.shape[0]:
            size = 2 * (n_heap + n_fresh)
            heap_count, heap_pair = _grown(heap_count, size), _grown(heap_pair, size)
        for k in range(n_fresh):
            p = fresh[k]
            n_heap = _heap_push(heap_count, heap_pair, n_heap, pair_count[p], p, pair_a, pair_b)
    return merges


@njit(cache=True)
def join_table(lefts, rights, joined):
    """The hash table ``key(lefts[k], rights[k]) -> joined[k]`` that encoding reads."""
    capacity = 16
    while capacity < 2 * lefts.shape[0]:
        capacity *= 2
    table_keys = np.full(capacity, EMPTY, np.int64)
    table_vals = np.empty(capacity, np.int64)
    for k in range(lefts.shape[0]):
        key = _key(lefts[k], rights[k])
        s = _slot(table_keys, key)
        table_keys[s], table_vals[s] = key, joined[k]
    return table_keys, table_vals


@njit(cache=True, inline="always")
def _rank(table_keys, table_vals, left, right):
    """The token that parts ``left`` and ``right`` join into (its rank), or NO_RANK."""
    s = _slot(table_keys, _key(left, right))
    return table_vals[s] if table_keys[s] != EMPTY else NO_RANK


# --8<-- [start:encode]
@njit(cache=True)
def encode_pieces(data, offsets, table_keys, table_vals):
    """Encodes each piece ``data[offsets[k]:offsets[k + 1]]`` (bytes) into token ids.

    Returns ``(ids, ends)``: piece k's ids are ``ids[ends[k - 1]:ends[k]]`` (from 0 for k = 0).
    """
    ids = np.empty(data.shape[0], np.int32)  # never more tokens than bytes
    ends = np.empty(offsets.shape[0] - 1, np.int64)
    parts = np.empty(data.shape[0], np.int32)
    ranks = np.empty(data.shape[0], np.int64)
    n_out = 0
    for k in range(offsets.shape[0] - 1):
        n = offsets[k + 1] - offsets[k]
        for i in range(n):
            parts[i] = data[offsets[k] + i]  # one part per byte; byte b is token b
        for i in range(n - 1):  # ranks[i]: what parts i and i + 1 join into
            ranks[i] = _rank(table_keys, table_vals, parts[i], parts[i + 1])
        while n > 1:
            best = 0
            for i in range(1, n - 1):  # the lowest rank; the leftmost on a tie
                if ranks[i] < ranks[best]:
                    best = i
            if ranks[best] == NO_RANK:
                break
            parts[best] = ranks[best]  # join parts best and best + 1
            for i in range(best + 1, n - 1):
                parts[i] = parts[i + 1]
                ranks[i] = ranks[i + 1]
            n -= 1
            if best > 0:
                ranks[best - 1] = _rank(table_keys, table_vals, parts[best - 1], parts[best])
            if best < n - 1:
                ranks[best] = _rank(table_keys, table_vals, parts[best], parts[best + 1])
        ids[n_out : n_out + n] = parts[:n]
        n_out += n
        ends[k] = n_out
    return ids[:n_out], ends


# --8<-- [end:encode]
