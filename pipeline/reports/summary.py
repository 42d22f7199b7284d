"""What in a finished transcription's summary (`pipeline/graph.py::run_transcription`) a user should look at."""

from __future__ import annotations

from typing import Any


def findings(summary: dict[str, Any]) -> list[str]:
    """What in a finished job's summary a user should look at, one line each."""
    lines = []
    if summary.get("error_rows_replaced"):
        lines.append(f"{summary['error_rows_replaced']} error row(s) of earlier runs transcribed again "
                     "(--retry-errors) and replaced by their new rows")
    if summary["duplicates_removed"]:
        lines.append(f"{summary['duplicates_removed']} row(s) named an utterance (same audio, offset, duration, "
                     "channel and id) that another row already had: each utterance is written once")
    if summary.get("repeats_differing"):
        lines.append(f"{summary['repeats_differing']} utterance(s) listed more than once with different reference "
                     "text or extra keys: each keeps the row of its first listing (the first manifest in name order, "
                     f"then the first line), e.g. {summary['repeats_differing_examples'][0]}")
    if summary["ids_given_to_several_utterances"]:
        lines.append(f"{summary['ids_given_to_several_utterances']} manifest id(s) name more than one utterance "
                     f"(all kept), e.g. {', '.join(summary['ids_given_to_several_examples'])}")
    shorter = summary.get("durations_shorter_than_audio", 0)
    longer = summary["duration_mismatches"] - shorter
    if longer:
        shorter_examples = set(summary.get("durations_shorter_examples", []))
        example = next((e for e in summary["duration_mismatch_examples"] if e not in shorter_examples), None)
        lines.append(f"{longer} row(s) whose manifest duration is longer than their audio: transcribed as far as the "
                     "audio goes (column audio_duration has the length decoded)"
                     + (f", e.g. {example}" if example else ""))
    if shorter:
        lines.append(f"{shorter} row(s) whose manifest duration is shorter than their audio file: only that much of "
                     "each was transcribed (offset and duration select a segment, as in NeMo); to transcribe the "
                     "whole files, correct their durations (column file_duration has each file's length), e.g. "
                     f"{summary['durations_shorter_examples'][0]}")
    return lines
