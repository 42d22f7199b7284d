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
    if summary["ids_given_to_several_utterances"]:
        lines.append(f"{summary['ids_given_to_several_utterances']} manifest id(s) name more than one utterance "
                     f"(all kept), e.g. {', '.join(summary['ids_given_to_several_examples'])}")
    if summary["duration_mismatches"]:
        lines.append(f"{summary['duration_mismatches']} row(s) whose manifest duration differs from the audio's, "
                     f"e.g. {summary['duration_mismatch_examples'][0]} (column audio_duration has the measured one)")
    return lines
