"""WIND beam search for RNN-T (Xu et al., 2025), batched over utterances, with n-gram LM shallow fusion.

Dims: B batch, T frames, H joint hidden, V labels with blank, K beam, W window, G = W + 1 frame lists per
utterance, C hypotheses per list, S = G * C hypothesis slots per utterance, E = S + K * K entries of a step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoders.hypotheses import NO_LABEL, BatchedHypotheses, extend_hashes
from decoders.transducer.beam_base import NEG_INF, BeamState, Run, TransducerBeamSearch, top_k


class WindBeamSearch(TransducerBeamSearch):
    """WIND beam search (Xu et al., 2025, "WIND: Accelerated RNN-T Decoding with Windowed Inference for
    Non-blank Detection", arXiv 2505.13765, its third algorithm), batched over utterances on a `BeamTree`. RNN-T
    only: a TDT model is refused when the search is built.

    The search, per utterance. Hypotheses are filed by the frame they stand at (the frame they read next).
    Each step takes the list at the smallest frame t (the search ends when that frame is the utterance's length
    T) and:
    1. merges and prunes it as modified adaptive expansion search does: identical hypotheses were merged when
       they were filed (log-sum-exp); a hypothesis B that extends another one A of the list by one label b also
       gets the probability of reaching it from A by emitting b on frame t, logaddexp(score(B), score(A) +
       fused_A(b)) with the scores from before this step, and A is dropped; the K best are kept. (The paper's
       wording allows B to extend A by several labels; like NeMo's batched mAES, we take one.)
    2. runs the joint over the window t..t+n-1, n = min(W, T - t), in one call for every hypothesis of the list
       (its first frame serves step 1's merge);
    3. forms the window scores: label v at offset j gets the blank scores at offsets 0..j-1 plus v's score at
       t + j; blank gets the blank scores of the whole window. After `max_symbols_per_frame` labels in a row on
       frame t, offset 0 offers no label (the guard against looping on one frame, as `max_symbols` in greedy);
    4. takes each kept hypothesis's K best entries (ranked by the model's scores with early pruning, by the
       fused scores with late), less those ranked `expansion_gamma` or more below its best entry: label v at
       offset j files the hypothesis extended by v, emitted on frame t + j, under t + j (so several labels may
       come from one frame, in later steps); blank files it unchanged under t + n. The list at each frame
       merges identical hypotheses as they arrive and keeps its C best (`frame_list_size`, default K).
    The answer is the best hypothesis filed under T (by `score / (non_blank_length + 1)` or by raw score), as
    for the other searches; each label keeps the frame it was emitted on, so timestamps come out as theirs.
    Scores and LM fusion (`lm_weight`, `blank_lm_scoring`, `pruning`) follow `decoders/transducer/beam.py`,
    applied frame by frame: a window's blank score is the sum of its frames' fused blank scores.

    Where this reads the paper's words: the pruning by value in step 4 is mAES's (its `expansion_gamma`, 2.3 as
    for AES++); with `expansion_gamma=float("inf")` each hypothesis keeps its K best entries whatever their
    scores, the step taken literally. Without it a list's children on its own frame (labels at offset 0, however
    unlikely) form a new list that nothing outscores, so each frame comes round up to `max_symbols` + 1 times:
    on the bundled model more steps and time than this default, and a worse WER without an LM (measured in
    docs/benchmarks.md, "WIND beam search against ALSD++ and AES++"). The paper lets a list grow until its turn;
    C bounds the memory so that the search runs on fixed-size tensors (tests/decoders/transducer/test_wind_beam.py
    checks that with C at least the largest list the unbounded search held, the results are the unbounded
    search's). A window compares a label on frame t with blank over all n frames, so a model whose blank is likely
    but not near-certain (random models) emits labels where greedy would not.

    Batched: each utterance moves through its frames on its own (`frame` [B]). Its hypotheses live in S = G * C
    tree slots, G = W + 1 lists of C slots; the list of frame f is slot group f mod G: every hypothesis waiting
    stands at a frame in t..t+W, so no two of them share a group. A step processes every utterance's current
    list at once ([B, C] for the merge, [B, C, W, V] for the window) and then files the [B, K, K] children: the
    E = S + K * K entries (hypotheses waiting, children) merge by hash and each group keeps its C best, the new
    tree column. Pieces: `start` and `step`; the host loop reads one flag per step and a step holds no host
    read, so the search replays as CUDA graphs like the others.
    """

    supports_tdt = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = self.config
        self.groups = config.window_size + 1
        self.list_size = config.frame_list_size or config.beam_size

    def _hypothesis_slots(self) -> int:
        return self.groups * self.list_size

    def _pieces(self, state: BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        return {"start": lambda: self._start(state), "step": lambda: self._step(state, eager)}

    def _search(self, state: BeamState, run: Run) -> None:
        run("start")
        columns = 0
        while bool(state.decoding.any()):
            columns += 1
            state.tree.ensure_capacity_(columns)
            run("step")

    def _max_columns(self, max_time: int) -> int:
        # a frame's list comes round at most max_symbols + 1 times: each round's children that stay on the frame
        # carry one more label emitted there
        return max_time * (self.config.max_symbols_per_frame + 1) + 1

    def _best(self, state: BeamState, batch_size: int | None = None) -> BatchedHypotheses:
        # every hypothesis left stands at the end; the n-best are the K best of them, not all S slots
        tree = state.tree
        order = tree.ranking(self.config.length_normalization)[:batch_size, : self.config.beam_size]
        best = tree.to_hypotheses(order[:, :1])
        if self.config.return_nbest:
            best.nbest = tree.to_hypotheses(order)
        return best

    def _start(self, state: BeamState) -> None:
        state.reset_()  # the empty hypothesis in slot 0: frame 0, group 0
        self._update_frame(state)

    def _update_frame(self, state: BeamState) -> None:
        """Each utterance's current frame: the smallest at which a hypothesis waits (`decoding` where one does)."""
        tree, lengths = state.tree, state.encoder_lengths
        waiting = (tree.scores > NEG_INF) & (tree.next_frames < lengths.unsqueeze(1))
        torch.any(waiting, dim=1, out=state.decoding)
        frames = torch.where(waiting, tree.next_frames, state.max_time).amin(dim=1)
        torch.where(state.decoding, frames, lengths, out=state.frame)

    def _merge_and_prune(self, state: BeamState, list_slots: Tensor, scores: Tensor, fused: Tensor) -> Tensor:
        """Step 1's prefix merging over the lists in `list_slots` [B, C] with `scores` [B, C] and the fused scores
        on their frame `fused` [B, C, V] -> the merged scores [B, C], -inf for the prefixes dropped."""
        tree, list_size = state.tree, list_slots.shape[1]
        hashes = tree.hashes.gather(1, list_slots)
        prefix_hashes = tree.prefix_hashes.gather(1, list_slots)
        lengths = tree.non_blank_lengths.gather(1, list_slots)
        last_labels = tree.last_labels.gather(1, list_slots)
        live = scores > NEG_INF
        # [B, C(y), C(x)]: x is y without its last label
        is_prefix = (
            (prefix_hashes.unsqueeze(2) == hashes.unsqueeze(1))
            & (lengths.unsqueeze(2) == lengths.unsqueeze(1) + 1)
            & live.unsqueeze(2)
            & live.unsqueeze(1)
        )
        # [B, C(y), C(x)]: x's score plus x's fused score of y's last label on this frame
        extension = fused.gather(2, last_labels.clamp(min=0).unsqueeze(1).expand(-1, list_size, -1))
        extension = torch.where(is_prefix, scores.unsqueeze(1) + extension.transpose(1, 2), NEG_INF)
        scores = torch.logaddexp(scores, torch.logsumexp(extension, dim=2))
        return torch.where(is_prefix.any(dim=1), NEG_INF, scores)  # prefixes of others are dropped

    def _window_entries(self, scores: Tensor, inside: Tensor, no_label_now: Tensor) -> Tensor:
        """Step 3: scores [B, K, W, V] per frame of the window, inside [B, W] (the frames before the end),
        no_label_now [B, K] (max_symbols reached on frame t) -> [B, K, W * (V - 1) + 1]: label v at offset j
        at j * (V - 1) + v, then the blank of the whole window."""
        blank = self.model.blank_id
        blanks = torch.where(inside.unsqueeze(1), scores[..., blank], 0.0)  # [B, K, W]
        totals = torch.cumsum(blanks, dim=-1)
        before = torch.cat([torch.zeros_like(totals[..., :1]), totals[..., :-1]], dim=-1)  # blanks at 0..j-1
        labels = before.unsqueeze(-1) + scores[..., :blank]
        allowed = inside.unsqueeze(1).expand_as(blanks).clone()
        allowed[..., 0] &= ~no_label_now
        labels = torch.where(allowed.unsqueeze(-1), labels, NEG_INF)
        return torch.cat([labels.flatten(2), totals[..., -1:]], dim=-1)

    def _step(self, state: BeamState, eager: bool) -> None:
        tree, model, config = state.tree, self.model, self.config
        batch_size, slots, beam_size = state.batch_size, state.beam_size, config.beam_size
        window, list_size, groups = config.window_size, self.list_size, self.groups
        blank, labels_count = model.blank_id, model.vocab_size
        frame, lengths, decoding = state.frame, state.encoder_lengths, state.decoding
        device = frame.device

        # 2. the joint over the window for every hypothesis of each utterance's current list [B, C]; its first
        # frame also serves step 1
        list_slots = torch.remainder(frame, groups).unsqueeze(1) * list_size + torch.arange(list_size, device=device)
        window_frames = frame.unsqueeze(1) + torch.arange(window, device=device)  # [B, W]
        inside = window_frames < lengths.unsqueeze(1)
        prediction = tree.gather(state.beam_view(state.prediction), list_slots).unsqueeze(2)  # [B, C, 1, H]
        logits = self._joint(state, window_frames.unsqueeze(1).expand(-1, list_size, -1), prediction)
        log_probs, fused = self._label_scores(state, logits, list_slots)  # [B, C, W, V]

        # 1. merge and prune: the K best of the list
        listed = tree.scores.gather(1, list_slots)
        scores = torch.where(decoding.unsqueeze(1), listed, NEG_INF)
        if list_size > 1:
            scores = self._merge_and_prune(state, list_slots, scores, fused[:, :, 0])
        tree.scores.scatter_(1, list_slots, torch.where(decoding.unsqueeze(1), scores, listed))
        kept_scores, kept = top_k(scores, beam_size)  # kept: places in the list [B, K]
        kept_slots = list_slots.gather(1, kept)

        # 3-4. the window scores of every label at every offset, and each kept hypothesis's K best entries
        # (less those pruned by value): its children [B, K * K']; found for the whole list, then picked
        no_label_now = tree.frame_counts.gather(1, list_slots) >= config.max_symbols_per_frame
        values = self._window_entries(fused, inside, no_label_now)  # [B, C, W * (V - 1) + 1]
        ranking = values if config.pruning == "late" else self._window_entries(log_probs, inside, no_label_now)
        ranked, entries = top_k(ranking, beam_size)  # [B, C, K']
        steps = values.gather(-1, entries)
        picks = kept.unsqueeze(-1).expand(-1, -1, entries.shape[-1])
        ranked, entries, steps = ranked.gather(1, picks), entries.gather(1, picks), steps.gather(1, picks)
        live = ((kept_scores > NEG_INF) & decoding.unsqueeze(1)).unsqueeze(-1)
        live = live & (ranked > ranked[..., :1] - config.expansion_gamma)
        child_scores = torch.where(live, kept_scores.unsqueeze(-1) + steps, NEG_INF).flatten(1)
        is_blank = entries == window * labels_count
        offsets = torch.div(entries, labels_count, rounding_mode="floor")
        child_labels = torch.where(is_blank, blank, entries % labels_count).flatten(1)
        frames = frame.view(-1, 1, 1)
        span = (lengths - frame).clamp(max=window).view(-1, 1, 1)  # n
        child_frames = torch.where(is_blank, frames, frames + offsets).flatten(1)  # where a label is emitted
        child_next_frames = torch.where(is_blank, frames + span, frames + offsets).flatten(1)
        child_parents = kept_slots.unsqueeze(-1).expand_as(entries).flatten(1)

        # filing: the hypotheses still waiting (not the list just taken) and the children, E in all, merge
        taken = torch.zeros_like(tree.scores, dtype=torch.bool).scatter_(
            1, list_slots, decoding.unsqueeze(1).expand_as(list_slots)
        )
        waiting_scores = torch.where(taken, NEG_INF, tree.scores)
        waiting_scores, child_scores = self._merge_identical(
            state, waiting_scores, child_scores, child_parents, child_labels, child_next_frames
        )
        scores = torch.cat([waiting_scores, child_scores], dim=1)  # [B, E]
        parents = torch.cat([state.beam_range.expand(batch_size, -1), child_parents], dim=1)
        labels = torch.cat([torch.full_like(tree.next_frames, NO_LABEL), child_labels], dim=1)
        next_frames = torch.cat([tree.next_frames, child_next_frames], dim=1)
        emitted = torch.cat([tree.next_frames, child_frames], dim=1)

        # each frame's list keeps its C best: the new column, group g in slots g*C .. g*C + C - 1
        group = torch.remainder(next_frames, groups)  # [B, E]
        in_group = group.unsqueeze(1) == torch.arange(groups, device=device).view(1, -1, 1)  # [B, G, E]
        new_scores, picked = torch.where(in_group, scores.unsqueeze(1), NEG_INF).topk(list_size, dim=2)
        new_scores, picked = new_scores.view(batch_size, slots), picked.view(batch_size, slots)
        new_labels = torch.where(new_scores > NEG_INF, labels.gather(1, picked), NO_LABEL)  # none: nothing to run
        self._append_(
            state,
            parents.gather(1, picked),
            new_labels,
            new_scores,
            emitted.gather(1, picked),
            next_frames.gather(1, picked),
            None,
            eager,
        )
        self._update_frame(state)

    @staticmethod
    def _merge_identical(
        state: BeamState,
        waiting_scores: Tensor,
        child_scores: Tensor,
        parents: Tensor,
        labels: Tensor,
        next_frames: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Hypotheses waiting [B, S] (distinct: merged when they were filed) and children [B, N] (parent slot,
        label or blank, frame they stand at) that are the same hypothesis (hash, last label, non-blank length) at
        the same frame: the best (the one waiting, on a tie) keeps the log-sum-exp of their scores, the others get
        -inf -> (waiting scores, child scores)."""
        tree = state.tree
        is_label = labels != tree.blank_id
        parent_hashes = tree.hashes.gather(1, parents)
        hashes = torch.where(is_label, extend_hashes(parent_hashes, labels), parent_hashes)
        last_labels = torch.where(is_label, labels, tree.last_labels.gather(1, parents))
        lengths = tree.non_blank_lengths.gather(1, parents) + is_label

        def same(others: tuple[Tensor, ...]) -> Tensor:  # [B, N, others]
            mine = (hashes, last_labels, lengths, next_frames)
            matches = [a.unsqueeze(2) == b.unsqueeze(1) for a, b in zip(mine, others)]
            return matches[0] & matches[1] & matches[2] & matches[3]

        waiting = (tree.hashes, tree.last_labels, tree.non_blank_lengths, tree.next_frames)
        # each child's group, the hypothesis waiting first: [B, N, S + N]
        group_scores = torch.cat([
            torch.where(same(waiting), waiting_scores.unsqueeze(1), NEG_INF),
            torch.where(same((hashes, last_labels, lengths, next_frames)), child_scores.unsqueeze(1), NEG_INF),
        ], dim=2)
        places = torch.arange(child_scores.shape[1], device=labels.device) + waiting_scores.shape[1]
        keep = group_scores.argmax(dim=2) == places
        merged_children = torch.where(keep, torch.logsumexp(group_scores, dim=2), NEG_INF)
        # each waiting hypothesis's group: itself and the children equal to it, [B, S, N]
        children = group_scores[..., : waiting_scores.shape[1]].transpose(1, 2) > NEG_INF
        equal_children = torch.where(children, child_scores.unsqueeze(1), NEG_INF)
        outscored = (equal_children > waiting_scores.unsqueeze(2)).any(dim=2)
        merged_waiting = torch.logaddexp(waiting_scores, torch.logsumexp(equal_children, dim=2))
        return torch.where(outscored, NEG_INF, merged_waiting), merged_children
