"""The compiled kernel of `decoders/ctc/beam_cpu.py`'s CTC prefix beam search (numba): one utterance's search
(`search_batch` runs those of a thread's share), blank collapse in front, the n-gram LM read from its arrays, and the
bounded selection of the K best candidates. Its rules are `CpuCtcBeamSearch`'s (that module's docstring)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from decoders.ctc.beam import HASH_MULTIPLIER
from decoders.ngram import fill_row

COLLAPSE_NONE, COLLAPSE_WEAK, COLLAPSE_THRESHOLD = 0, 1, 2
# a candidate bound within this of the K-th best is still scored: bounds and scores add the same terms in
# different orders, and float32 LM sums may round either way
_BOUND_SLACK = 1e-3
# a prefix that scores more labels than this on a frame reads them from its state's LM row (about V + the arcs on
# its back-off chain to build, then cached) instead of walking the back-off chain for each
_DENSE_LM_LABELS = 8


@njit(cache=True, nogil=True, error_model="numpy")
def search_batch(utterances, log_probs, lengths, blank_id, beam, nbest, labels_per_frame, token_min_log_prob,
                  lm_weight, bonus, beam_threshold, end_of_sentence, collapse_mode, log_threshold, use_lm,
                  initial_states, arc_offsets, arc_keys, arc_weights, arc_targets, backoff_targets, backoff_weights,
                  final_weights, best_arc, lm_vocab_size, tokens, frames, token_scores, token_lengths, scores):
    """The search of the utterances listed, one after another (the GIL released); results go to their rows of
    tokens/frames/token_scores [B, N, T], token_lengths [B, N] and scores [B, N]; initial_states [B]: each
    utterance's first LM state."""
    for b in utterances:
        kept = _kept_frames(log_probs[b], lengths[b], blank_id, collapse_mode, log_threshold[0])
        _search_one(log_probs[b], kept, blank_id, beam, labels_per_frame, token_min_log_prob, lm_weight, bonus,
                    beam_threshold, end_of_sentence, use_lm, initial_states[b], arc_offsets, arc_keys, arc_weights,
                    arc_targets, backoff_targets, backoff_weights, final_weights, best_arc, lm_vocab_size,
                    tokens[b], frames[b], token_scores[b], token_lengths[b], scores[b])


@njit(cache=True, nogil=True, error_model="numpy")
def _kept_frames(log_probs, length, blank_id, mode, log_threshold):
    """The frames the search visits: all of [0, length), or those blank collapse keeps (`collapse_blanks`)."""
    if mode == COLLAPSE_NONE:
        return np.arange(length)
    num_labels = log_probs.shape[1]
    is_blank = np.zeros(length + 1, dtype=np.bool_)  # one past the end: not a label frame
    for t in range(length):
        if mode == COLLAPSE_WEAK:
            best = 0
            for v in range(1, num_labels):
                if log_probs[t, v] > log_probs[t, best]:  # the first maximum, as torch's max
                    best = v
            is_blank[t] = best == blank_id
        else:
            is_blank[t] = log_probs[t, blank_id] > log_threshold
    kept = np.empty(length, dtype=np.int64)
    count = 0
    seen_label = False
    for t in range(length):
        if not is_blank[t]:
            kept[count] = t
            count += 1
            seen_label = True
        elif seen_label and t + 1 < length and not is_blank[t + 1]:  # the last blank of an interior run
            kept[count] = t
            count += 1
    return kept[:count].copy()


@njit(cache=True, nogil=True, error_model="numpy")
def _logaddexp(a, b):
    """torch.logaddexp's formula, so that sums round as the torch search's do."""
    if a == b and math.isinf(a):
        return a
    high = max(a, b)
    return high + math.log1p(math.exp(-abs(a - b)))


@njit(cache=True, nogil=True, error_model="numpy")
def _lm_walk(state, label, vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets, backoff_targets,
             backoff_weights):
    """`walk_torch` for one state and label: (float32 log-probability, next state)."""
    accumulated = np.float32(0.0)
    while state != 0:
        key = state * vocab_size + label
        low, high = arc_offsets[state], arc_offsets[state + 1]
        end = high
        while low < high:
            middle = (low + high) >> 1
            if arc_keys[middle] < key:
                low = middle + 1
            else:
                high = middle
        if low < end and arc_keys[low] == key:
            return accumulated + arc_weights[low], np.int64(arc_targets[low])
        accumulated = accumulated + backoff_weights[state]
        state = backoff_targets[state]
    # the empty context holds every label, at arc index == label
    return accumulated + arc_weights[label], np.int64(arc_targets[label])


@njit(cache=True, nogil=True, error_model="numpy")
def _cached_lm_row(state, row_states, row_scores, row_next, row_clock, vocab_size, arc_offsets, arc_keys, arc_weights,
                   arc_targets, backoff_targets, backoff_weights):
    """The cache slot holding `state`'s LM row: scores and next states of every label, exactly `_lm_walk`'s (the
    empty context's arcs plus the back-offs of the whole chain, overwritten by the arcs of each state on the
    chain, most specific last; the same float32 sums). A miss fills the slots in turn."""
    for slot in range(row_states.shape[0]):
        if row_states[slot] == state:
            return slot
    slot = row_clock[0] % row_states.shape[0]
    row_clock[0] += 1
    row_states[slot] = state
    fill_row(state, row_scores[slot], row_next[slot], vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
             backoff_targets, backoff_weights)
    return slot


@njit(cache=True, nogil=True, error_model="numpy")
def _lm_bound(state, best_arc, backoff_targets, backoff_weights):
    """An upper bound of the LM score of any label from `state`: the best arc of each state on its back-off
    chain plus the back-off weights passed to reach it."""
    accumulated = 0.0
    bound = -np.inf
    while True:
        bound = max(bound, accumulated + best_arc[state])
        if state == 0:
            return bound
        accumulated += backoff_weights[state]
        state = backoff_targets[state]


@njit(cache=True, nogil=True, error_model="numpy")
def _search_one(log_probs, kept, blank_id, beam, labels_per_frame, token_min_log_prob, lm_weight, bonus,
                beam_threshold, end_of_sentence, use_lm, initial_state, arc_offsets, arc_keys, arc_weights,
                arc_targets, backoff_targets, backoff_weights, final_weights, best_arc, lm_vocab_size,
                out_tokens, out_frames, out_token_scores, out_lengths, out_scores):
    """One utterance: log_probs [T, V] searched over the frames `kept` [T'] -> its N best into out_* [N, ...]."""
    num_labels = log_probs.shape[1]
    num_frames = kept.shape[0]
    nbest = out_scores.shape[0]
    minus_inf = -np.inf
    if num_labels == 1:  # blank is the only label: the empty hypothesis, with every frame's blank
        total = 0.0
        for i in range(num_frames):
            total += log_probs[kept[i], 0]
        out_scores[0] = total
        return
    prune_lm = use_lm and lm_weight >= 0.0  # a negative weight has no bound from the arcs' maxima: score all

    # the beam; slots 0 .. valid_count - 1 hold prefixes, best first (slot 0 starts as the empty prefix)
    p_blank = np.full(beam, minus_inf)
    p_label = np.full(beam, minus_inf)
    prefix_extra = np.zeros(beam)  # lm_weight * LM log-probability + insertion bonus * length
    lm_bounds = np.zeros(beam)  # lm_weight * an upper bound of the next label's LM score
    prefix_lengths = np.zeros(beam, dtype=np.int64)
    last_labels = np.full(beam, blank_id, dtype=np.int64)
    hashes = np.zeros(beam, dtype=np.int64)
    parent_hashes = np.full(beam, -1, dtype=np.int64)
    lm_states = np.full(beam, initial_state, dtype=np.int64)
    p_blank[0] = 0.0
    if prune_lm:
        lm_bounds[0] = lm_weight * _lm_bound(initial_state, best_arc, backoff_targets, backoff_weights)
    elif use_lm:
        lm_bounds[0] = np.inf
    valid_count = 1
    # per frame: each slot's source slot and appended label (-1: none)
    history_parents = np.empty((num_frames, beam), dtype=np.int32)
    history_labels = np.empty((num_frames, beam), dtype=np.int32)

    total = np.empty(beam)
    same_blank = np.empty(beam)
    same_label = np.empty(beam)
    same_score = np.empty(beam)
    restamp = np.zeros(beam, dtype=np.bool_)
    parent_slots = np.zeros(beam, dtype=np.int64)
    child_counts = np.zeros(beam, dtype=np.int64)
    child_labels = np.zeros((beam, beam), dtype=np.int64)
    # the candidates kept so far (at most K): score, source slot, label (-1: the prefix itself), p_label,
    # prefix extra and LM state
    candidate_scores = np.empty(beam)
    candidate_sources = np.empty(beam, dtype=np.int64)
    candidate_labels = np.empty(beam, dtype=np.int64)
    candidate_p_label = np.empty(beam)
    candidate_extra = np.empty(beam)
    candidate_states = np.empty(beam, dtype=np.int64)
    selected = np.empty(num_labels, dtype=np.int64)
    selected_scores = np.empty(num_labels)
    first_label = np.empty(1, dtype=np.int64)
    first_score = np.empty(1)
    order = np.empty(beam, dtype=np.int64)
    next_p_blank = np.empty(beam)
    next_p_label = np.empty(beam)
    next_extra = np.empty(beam)
    next_bounds = np.empty(beam)
    next_lengths = np.empty(beam, dtype=np.int64)
    next_last = np.empty(beam, dtype=np.int64)
    next_hashes = np.empty(beam, dtype=np.int64)
    next_parent_hashes = np.empty(beam, dtype=np.int64)
    next_states = np.empty(beam, dtype=np.int64)

    # LM rows of recent states over the whole vocabulary, for prefixes that score many labels on a frame
    cache_size = 2 * beam + 2 if use_lm else 1
    row_states = np.full(cache_size, -1, dtype=np.int64)
    row_scores = np.empty((cache_size, lm_vocab_size if use_lm else 1), dtype=np.float32)
    row_next = np.empty((cache_size, lm_vocab_size if use_lm else 1), dtype=np.int64)
    row_clock = np.zeros(1, dtype=np.int64)

    for i in range(num_frames):
        row = log_probs[kept[i]]
        blank_score = np.float64(row[blank_id])
        # each prefix goes on as itself, through blank or a repeat of its last label
        for k in range(valid_count):
            total[k] = _logaddexp(p_blank[k], p_label[k])
            same_blank[k] = total[k] + blank_score
            same_label[k] = p_label[k] + row[last_labels[k]]
            same_score[k] = _logaddexp(same_blank[k], same_label[k])
            child_counts[k] = 0
        # merge: the extension of slot j's parent by slot j's last label is slot j's prefix
        for j in range(valid_count):
            parent = -1
            for k in range(valid_count):
                if hashes[k] == parent_hashes[j]:
                    parent = k
                    break
            parent_slots[j] = parent
            restamp[j] = False
            if parent >= 0:
                mass = p_blank[parent] if last_labels[j] == last_labels[parent] else total[parent]
                merged = mass + row[last_labels[j]]
                restamp[j] = merged > same_score[j]  # the larger contribution decides whose frames it keeps
                same_score[j] = _logaddexp(same_score[j], merged) + prefix_extra[j]
                same_label[j] = _logaddexp(same_label[j], merged)
                child_labels[parent, child_counts[parent]] = last_labels[j]
                child_counts[parent] += 1
            else:
                same_score[j] = same_score[j] + prefix_extra[j]

        count = 0
        best = minus_inf
        for j in range(valid_count):
            score = same_score[j]
            if score == minus_inf:
                continue
            slot = _candidate_slot(score, candidate_scores, count)
            if slot >= 0:
                count, best = _keep_candidate(
                    slot, score, j, -1, same_label[j], prefix_extra[j], lm_states[j], count, best, candidate_scores,
                    candidate_sources, candidate_labels, candidate_p_label, candidate_extra, candidate_states,
                )

        # extensions: the labels that may start prefixes on this frame (CtcBeamSearch._select_labels: the M
        # best non-blank labels, of those the ones at or above token_min_log_prob or the frame's best), best
        # first, and of those only labels that can reach what the beam keeps for some prefix. Both filters keep
        # an upper set of scores, so filtering first and taking the M best after selects the same labels. The
        # frame's best label goes first for every prefix (phase 0): its extensions usually set the bar that the
        # other labels (phase 1) must reach, so few of those are scored.
        top_label = -1
        top_score = minus_inf
        for v in range(num_labels):
            if v != blank_id and row[v] > top_score:
                top_score = np.float64(row[v])
                top_label = v
        first_label[0] = top_label
        first_score[0] = top_score
        ordered = True
        for phase in range(2):
            if phase == 0:
                if top_label < 0:
                    continue
                listed_labels = first_label
                listed_scores = first_score
                listed = 1
            else:
                ceiling = minus_inf
                for k in range(valid_count):
                    ceiling = max(ceiling, total[k] + prefix_extra[k] + lm_bounds[k])
                ceiling += bonus
                floor = _floor(candidate_scores, count, beam, best, beam_threshold)
                reachable = 0
                for v in range(num_labels):
                    if v == blank_id or v == top_label:
                        continue
                    score = np.float64(row[v])
                    if token_min_log_prob > minus_inf and not score >= token_min_log_prob:
                        continue
                    if score + ceiling >= floor - _BOUND_SLACK:
                        selected[reachable] = v
                        selected_scores[reachable] = score
                        reachable += 1
                # the best label is one of the M; only a cut needs the order (else it costs more than it saves)
                ordered = reachable > labels_per_frame - 1
                if ordered:
                    _sort_descending(selected_scores, selected, reachable)
                listed_labels = selected
                listed_scores = selected_scores
                listed = min(reachable, labels_per_frame - 1)
            floor = _floor(candidate_scores, count, beam, best, beam_threshold)
            for k in range(valid_count):
                bound = total[k] + prefix_extra[k] + lm_bounds[k] + bonus
                row_slot = -1  # this prefix's LM row in the cache, where it pays to have one
                if use_lm:
                    wanted = 0
                    for index in range(listed):
                        if listed_scores[index] + bound >= floor - _BOUND_SLACK:
                            wanted += 1
                            if wanted > _DENSE_LM_LABELS:
                                break
                    if wanted > _DENSE_LM_LABELS:
                        row_slot = _cached_lm_row(lm_states[k], row_states, row_scores, row_next, row_clock,
                                                  lm_vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
                                                  backoff_targets, backoff_weights)
                for index in range(listed):
                    label_score = listed_scores[index]
                    if label_score + bound < floor - _BOUND_SLACK:
                        if ordered:
                            break
                        continue
                    label = listed_labels[index]
                    in_beam = False
                    for c in range(child_counts[k]):
                        if child_labels[k, c] == label:
                            in_beam = True
                    if in_beam:  # merged into that prefix above
                        continue
                    extend = (p_blank[k] if label == last_labels[k] else total[k]) + label_score
                    next_state = 0
                    if use_lm:
                        lm_label = label - (1 if label > blank_id else 0)
                        if row_slot >= 0:
                            lm_score = row_scores[row_slot, lm_label]
                            next_state = row_next[row_slot, lm_label]
                        else:
                            lm_score, next_state = _lm_walk(
                                lm_states[k], lm_label, lm_vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
                                backoff_targets, backoff_weights,
                            )
                        step = lm_weight * np.float64(lm_score) + bonus
                    else:
                        step = bonus
                    extra = prefix_extra[k] + step
                    score = extend + extra
                    if score == minus_inf or score < floor:  # below the K-th best or the threshold: never kept
                        continue
                    slot = _candidate_slot(score, candidate_scores, count)
                    if slot >= 0:
                        count, best = _keep_candidate(
                            slot, score, k, label, extend, extra, next_state, count, best, candidate_scores,
                            candidate_sources, candidate_labels, candidate_p_label, candidate_extra, candidate_states,
                        )
                        floor = _floor(candidate_scores, count, beam, best, beam_threshold)

        # the new beam: the kept candidates within the threshold of the best, best first
        kept_count = 0
        for c in range(count):
            if not candidate_scores[c] < best - beam_threshold:
                order[kept_count] = c
                kept_count += 1
        for a in range(1, kept_count):  # insertion sort, descending
            c = order[a]
            b = a - 1
            while b >= 0 and candidate_scores[order[b]] < candidate_scores[c]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = c
        for n in range(kept_count):
            c = order[n]
            source = candidate_sources[c]
            label = candidate_labels[c]
            next_p_label[n] = candidate_p_label[c]
            next_extra[n] = candidate_extra[c]
            next_states[n] = candidate_states[c]
            if label < 0:
                next_p_blank[n] = same_blank[source]
                next_bounds[n] = lm_bounds[source]
                next_lengths[n] = prefix_lengths[source]
                next_last[n] = last_labels[source]
                next_hashes[n] = hashes[source]
                next_parent_hashes[n] = parent_hashes[source]
                if restamp[source]:  # the parent's extension outweighed it: its lineage, stamped now
                    history_parents[i, n] = parent_slots[source]
                    history_labels[i, n] = last_labels[source]
                else:
                    history_parents[i, n] = source
                    history_labels[i, n] = -1
            else:
                next_p_blank[n] = minus_inf
                next_lengths[n] = prefix_lengths[source] + 1
                next_last[n] = label
                next_hashes[n] = hashes[source] * HASH_MULTIPLIER + 1 + label
                next_parent_hashes[n] = hashes[source]
                if prune_lm:
                    next_bounds[n] = lm_weight * _lm_bound(candidate_states[c], best_arc, backoff_targets,
                                                           backoff_weights)
                elif use_lm:
                    next_bounds[n] = np.inf
                else:
                    next_bounds[n] = 0.0
                history_parents[i, n] = source
                history_labels[i, n] = label
        valid_count = kept_count
        p_blank[:valid_count] = next_p_blank[:valid_count]
        p_label[:valid_count] = next_p_label[:valid_count]
        prefix_extra[:valid_count] = next_extra[:valid_count]
        lm_bounds[:valid_count] = next_bounds[:valid_count]
        prefix_lengths[:valid_count] = next_lengths[:valid_count]
        last_labels[:valid_count] = next_last[:valid_count]
        hashes[:valid_count] = next_hashes[:valid_count]
        parent_hashes[:valid_count] = next_parent_hashes[:valid_count]
        lm_states[:valid_count] = next_states[:valid_count]

    # final ranking, end of sentence included
    final = np.empty(valid_count)
    for k in range(valid_count):
        final[k] = _logaddexp(p_blank[k], p_label[k]) + prefix_extra[k]
        if end_of_sentence:
            final[k] = final[k] + lm_weight * np.float64(final_weights[lm_states[k]])
    ranked = np.arange(valid_count)
    _sort_descending(final, ranked, valid_count)
    for n in range(min(nbest, valid_count)):
        slot = ranked[n]
        if final[n] == minus_inf:
            break
        out_scores[n] = final[n]
        position = prefix_lengths[slot]
        out_lengths[n] = position
        for i in range(num_frames - 1, -1, -1):
            label = history_labels[i, slot]
            if label >= 0:
                position -= 1
                frame = kept[i]
                out_tokens[n, position] = label
                out_frames[n, position] = frame
                out_token_scores[n, position] = log_probs[frame, label]
            slot = history_parents[i, slot]


@njit(cache=True, nogil=True, error_model="numpy")
def _sort_descending(keys, values, count):
    """Heap sort of keys[:count] into descending order, values moved alike (numpy's sorts compile slowly)."""
    for start in range(count // 2 - 1, -1, -1):
        _sift_down(keys, values, start, count)
    for end in range(count - 1, 0, -1):
        keys[0], keys[end] = keys[end], keys[0]
        values[0], values[end] = values[end], values[0]
        _sift_down(keys, values, 0, end)


@njit(cache=True, nogil=True, error_model="numpy")
def _sift_down(keys, values, root, end):
    """Min-heap sift (a min-heap sorts descending)."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and keys[child + 1] < keys[child]:
            child += 1
        if not keys[child] < keys[root]:
            return
        keys[root], keys[child] = keys[child], keys[root]
        values[root], values[child] = values[child], values[root]
        root = child


# inlined, and without branches, so that numba prunes its reference counting of the six arrays (with the slot
# found in here, the search ran 1.3-1.8x slower)
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _keep_candidate(slot, score, source, label, p_label, extra, lm_state, count, best, candidate_scores,
                    candidate_sources, candidate_labels, candidate_p_label, candidate_extra, candidate_states):
    """A candidate into its slot (from `_candidate_slot`) -> count and best, updated."""
    candidate_scores[slot] = score
    candidate_sources[slot] = source
    candidate_labels[slot] = label
    candidate_p_label[slot] = p_label
    candidate_extra[slot] = extra
    candidate_states[slot] = lm_state
    return max(count, slot + 1), max(best, score)


@njit(cache=True, nogil=True, error_model="numpy")
def _candidate_slot(score, candidate_scores, count):
    """Where a candidate with this score goes among the K kept so far: a free slot, the worst one's slot if it
    beats it, or -1."""
    beam = candidate_scores.shape[0]
    if count < beam:
        return count
    worst = 0
    for c in range(1, beam):
        if candidate_scores[c] < candidate_scores[worst]:
            worst = c
    return worst if score > candidate_scores[worst] else -1


@njit(cache=True, nogil=True, error_model="numpy")
def _floor(candidate_scores, count, beam, best, beam_threshold):
    """The score a candidate must reach to be kept: the K-th best so far (once K are kept), and the threshold."""
    floor = best - beam_threshold
    if count == beam:
        worst = candidate_scores[0]
        for c in range(1, beam):
            worst = min(worst, candidate_scores[c])
        floor = max(floor, worst)
    return floor


__all__ = ["COLLAPSE_NONE", "COLLAPSE_THRESHOLD", "COLLAPSE_WEAK", "search_batch"]
