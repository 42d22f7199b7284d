"""What a job refuses before any cluster work, each check written once: a local model, LM or phrase list that is
missing or unusable, a decoding the model cannot run (its strategy, its long-audio attention, its calibration), a
voice-activity model that cannot load for `--segment vad`, and
GPUs asked of a cluster that has none (`asr_device`, once the job has joined its cluster, before any actor starts).

Every job runs these before Ray starts, so that a mistake costs one line and no cluster; `pipeline/graph.py` plans
a job with the same `plan_job` once a remote model is fetched. A name is local or remote by the one rule of
`pipeline/io/uris.py::local_path`: a local file is checked here, a remote one once it is fetched. Errors are
`PreflightError`s, one line each; the job puts its name in front.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import TranscribeJobConfig
from pipeline.decoding import DecodingPlan, plan_decoding
from pipeline.io import local_path
from pipeline.io.redact import redact
from pipeline.io.vad import vad_problem
from pipeline.model import ModelFacts
from pipeline.stages import check_attention


class PreflightError(ValueError):
    """Input a job cannot use, found before any cluster work: one line for the user."""


def check_model_file(model_uri: str) -> None:
    """Refuse a local model that is not there (a remote one is looked for when it is fetched)."""
    path = local_path(model_uri)
    if path is not None and not Path(path).is_file():
        raise PreflightError(f"no model at {model_uri}: pass --model PATH_OR_URI (a NeMo .nemo file)")


def fetched_model(model_uri: str, cache_dir: str) -> Path:
    """The model checked (`check_model_file`) and fetched into the node's cache: its file on this machine."""
    from pipeline.io import fetch_file, models_dir

    check_model_file(model_uri)
    return fetch_file(model_uri, cache_dir=models_dir(cache_dir))


def plan_job(facts: ModelFacts, config: TranscribeJobConfig, device: str = "cpu") -> DecodingPlan:
    """The job's decoding plan for the model of `facts`, with its long-audio attention checked against the
    encoder: a strategy or attention the model cannot run is refused (`ValueError`; `DecodingError` is one)."""
    plan = plan_decoding(facts, config.decoding, device, model_name=config.model.uri)
    check_attention(config.long_audio.attention, facts.encoder_attention, redact(config.model.uri))
    return plan


def asr_device(asked: str, cluster_gpus: float, autoscaler_gpus: float = 0.0) -> str:
    """Where the ASR actors run, decided once the job has joined its Ray cluster and before any actor starts:
    `asked` (`--device`; "auto": cuda where the cluster has GPUs now, `cluster_gpus`, or its autoscaler can add
    some, `autoscaler_gpus`, else cpu). `--device cuda` on a cluster that has no GPU and can get none is refused in
    one line: its ASR actors, one GPU each, would wait for a GPU forever."""
    if asked == "auto":
        return "cuda" if max(cluster_gpus, autoscaler_gpus) > 0 else "cpu"
    if asked == "cuda" and max(cluster_gpus, autoscaler_gpus) <= 0:
        raise PreflightError("--device cuda: the Ray cluster has no GPU and its autoscaler can add none, so the ASR "
                             "actors (one GPU each) would never start; pass --device cpu (or auto), or join a cluster "
                             "with GPUs (--ray-address)")
    return asked


def check_transcription(config: TranscribeJobConfig) -> None:
    """What a transcription job can refuse before Ray starts: a missing local model, LM or phrase list, and with
    a local model, a strategy, attention, calibration, LM or phrase list it cannot use (a remote model is checked
    by the driver once it is fetched)."""
    from pipeline.decoding import lm_problem
    from pipeline.model import LayoutUnavailable, read_model_facts, read_model_layout

    model_uri = config.model.uri
    check_model_file(model_uri)
    lm_uri = config.decoding.lm_uri
    lm_path = local_path(lm_uri) if lm_uri else None
    if lm_path is not None and not Path(lm_path).is_file():
        raise PreflightError(f"no LM at {lm_uri}: pass --lm PATH_OR_URI (a binary from `python jobs/build_lm.py`, "
                             "or an ARPA file)")
    phrases_uri = config.decoding.phrases_uri
    phrases_path = local_path(phrases_uri) if phrases_uri else None
    if phrases_path is not None:  # its lines are checked here; its tokens below, with a local model
        if not Path(phrases_path).is_file():
            raise PreflightError(f"no phrase list at {phrases_uri}: pass --phrases PATH_OR_URI (one phrase a line)")
        problem = phrase_list_problem(phrases_path, name=phrases_uri)
        if problem:
            raise PreflightError(f"--phrases {problem}")
    segment_problem = vad_problem(config.long_audio.segment, config.long_audio.chunk_s)
    if segment_problem:
        raise PreflightError(segment_problem)
    model_path = local_path(model_uri)
    if model_path is None:
        return
    try:
        facts = read_model_facts(model_path)
        plan = plan_job(facts, config)
    except ValueError as error:
        raise PreflightError(str(error)) from None
    if config.decoding.confidence_calibration:  # the writer checks it too; here it fails before Ray starts
        from pipeline.model import load_checked_calibration

        try:
            load_checked_calibration(config.model, plan)
        except (OSError, ValueError) as error:
            raise PreflightError(f"--confidence-calibration: {error}") from None
    if plan.fuses_lm and lm_path is not None:
        try:
            vocab_size = plan.lm_vocab_size(read_model_layout(model_path))
        except LayoutUnavailable:
            vocab_size = None  # checked once the model is loaded
        problem = lm_problem(lm_path, vocab_size, config.decoding.lm_level)
        if problem:
            raise PreflightError(f"--lm {problem}")
    if plan.boosts and phrases_path is not None:
        problem = phrase_list_problem(phrases_path, model_path, plan, name=phrases_uri)
        if problem:
            raise PreflightError(f"--phrases {problem}")


def phrase_list_problem(path: str, model_path: str | None = None, plan: DecodingPlan | None = None,
                        name: str | None = None) -> str | None:
    """Why the phrase list at a local `path` cannot be boosted (None: it can), read before any actor starts: its
    lines (an empty phrase, a malformed weight, not UTF-8), and, given a local model and its plan, each phrase's
    tokens (characters the tokenizer cannot write). Each message names the file (`name`, else `path`) and line.
    Used by `check_transcription` and `pipeline/lm/bias.py`."""
    from decoders.boosting import PhraseListError, read_phrase_list
    from pipeline.decoding import boosting_from_phrase_file
    from pipeline.model import LayoutUnavailable, read_model_layout

    try:
        if model_path is not None and plan is not None:
            try:
                layout = read_model_layout(model_path)
            except LayoutUnavailable:
                layout = None  # tokenized once the model is loaded
            if layout is not None:
                boosting_from_phrase_file(path, layout.tokenizer.processor, plan.lm_vocab_size(layout), name=name)
                return None
        read_phrase_list(path, name)
    except (PhraseListError, ValueError) as error:
        return str(error)
    return None
