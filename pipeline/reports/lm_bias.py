"""The report of `jobs/lm_bias.py` (`pipeline/lm/bias.py`): report.md's table and text, and its plots of the dev WER
against the LM weight and the boost weight.

Every WER and CER is given normalised, then as written in brackets (`pipeline/reports/scoring.py`), and the report
says so; the rules the domain text was normalised by for the tokenizer (`TextNormaliser.rules`) are listed.
"""

from __future__ import annotations

from typing import Any


def setting_text(trial: dict[str, Any], phrases: bool = False) -> str:
    """"LM weight 1.5, insertion bonus 6" or "no LM"; with `phrases`, and ", boost weight 0.5" or ", no boosting"."""
    text = "no LM"
    if trial["lm_weight"]:
        bonus = f", insertion bonus {trial['bonus']:g}" if trial["bonus"] is not None else ""
        text = f"LM weight {trial['lm_weight']:g}{bonus}"
    if not phrases:
        return text
    boost = trial.get("boost_weight", 0.0)
    return f"{text}, " + (f"boost weight {boost:g}" if boost else "no boosting")


def rate_cell(measured: dict[str, Any] | None, what: str = "wer") -> str:
    """"10.9% (35.2%)": a WER or CER (`what`) normalised, then as written where known; "-" where not measured."""
    if not measured or measured.get(what) is None:
        return "-"
    written = measured.get(f"written_{what}")
    return f"{measured[what]:.1%}" + (f" ({written:.1%})" if written is not None else "")


def _wer_of(result: dict[str, Any], key: str) -> str:
    return rate_cell(result.get(key))


def table_columns(lm: bool, phrases: bool) -> list[tuple[str, Any]]:
    """The report table's (header, cell of a strategy's result): with an LM and phrases, the LM setting chosen
    without boosting is a column of its own; with phrases alone, the baseline is "no boost"."""
    plain = "no LM" if lm else "no boost"
    both = lm and phrases
    columns = [("strategy", lambda r: r["name"]), ("head", lambda r: r["head"]),
               (f"dev WER {plain}", lambda r: rate_cell(r["baseline"]))]
    columns += [("dev WER no boost", lambda r: rate_cell(r["unboosted"]))] if both else []
    columns += [("dev WER tuned", lambda r: rate_cell(r["best"])),
                ("dev CER tuned", lambda r: rate_cell(r["best"], "cer"))]
    columns += [("setting chosen on dev", lambda r: setting_text(r["best"]))] if lm else []
    columns += [("boost weight chosen on dev", lambda r: f"{r['best']['boost_weight']:g}")] if phrases else []
    columns += [(f"test WER {plain}", lambda r: _wer_of(r, "test_baseline"))]
    columns += [("test WER no boost", lambda r: _wer_of(r, "test_unboosted"))] if both else []
    columns += [("test WER tuned", lambda r: _wer_of(r, "test_best")),
                ("test CER tuned", lambda r: rate_cell(r.get("test_best"), "cer")),
                ("decodes (reused)", lambda r: f"{r['decodes']} ({r['reused']})"),
                ("dev decode s", lambda r: f"{r['best']['decode_s']:.1f}")]
    return columns


def report_markdown(report: dict[str, Any]) -> str:
    lm, phrases = report["lm"], report.get("phrases")
    lines = ["# LM biasing report", ""]
    if lm:
        lines += [
            f"Model `{report['model']}`; domain text {', '.join(f'`{t}`' for t in report['text'])}: "
            f"{lm['sentences']} sentences after normalisation ({report['normalisation']}; "
            f"{report['unencodable_lines']} lines dropped: characters the tokenizer lacks).", "",
            *normalisation_lines(report),
            f"LM: order {lm['order']} (held-out perplexity per token by order: "
            + ", ".join(f"{o}: {p:.2f}" for o, p in lm["heldout_perplexity_by_order"].items())
            + f"), {sum(lm['ngram_counts'])} n-grams, `{report['lm_uri']}`.", ""]
    else:
        lines += [f"Model `{report['model']}`; no domain text: the phrase list alone, no LM.", ""]
    if phrases:
        lines += [f"Phrases: `{phrases['uri']}`, {phrases['phrases']} phrases; boost weights tried on dev at each "
                  "strategy's " + ("chosen LM setting" if lm else "baseline") + ": 0 (no boosting), "
                  + ", ".join(f"{w:g}" for w in phrases["boost_weights"])
                  + (" (then the LM weight once more either side of the best boost weight)" if lm else "") + ".", ""]
    lines += [
        f"Tuned on `{report['dev']}` ({report['dev_utterances']} utterances)"
        + (f", reported on `{report['test']}` ({report['test_utterances']} utterances, never tuned on)."
           if report.get("test") else "."), ""]
    lines += [scoring_line(), ""]
    columns = table_columns(bool(lm), bool(phrases))
    lines += ["| " + " | ".join(header for header, _ in columns) + " |",
              "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in report["strategies"]]
    chosen = report["chosen"]
    lines += ["", f"**Chosen: {chosen['name']}, {setting_text(chosen['best'], bool(phrases))}** "
              f"(dev WER {rate_cell(chosen['best'])}). `jobs/transcribe.py --config {report['decoding_yaml']}` "
              "transcribes with it."]
    if lm and not chosen["lm_helps"]:
        lines += ["", "No LM setting beat decoding without the LM on dev beyond chance (a lower WER, and more "
                  "utterances improved than made worse, sign test p < 0.05): the LM is not used. The domain text "
                  "may not match the dev set's speech."]
    if phrases and not chosen["boost_helps"]:
        lines += ["", "No boost weight beat decoding without boosting on dev beyond chance (a lower WER, and more "
                  "utterances improved than made worse, sign test p < 0.05): the phrase list is not used. Its "
                  "phrases may be rare in the dev set's speech."]
    if report.get("plot"):
        lines += ["", f"![dev WER against the LM weight]({report['plot']})"]
    if report.get("boost_plot"):
        lines += ["", f"![dev WER against the boost weight]({report['boost_plot']})"]
    if report.get("transcripts"):
        t = report["transcripts"]
        lines += ["", f"Corpus: {t['rows_ok']} transcripts, {t['rows_error']} error rows -> `{t['output']}`."]
    lines += ["", f"Wall time: {report['wall_s']:.0f} s (LM {report['lm_s']:.0f} s, "
              f"tuning {report['tuning_s']:.0f} s)."]
    return "\n".join(lines) + "\n"


def normalisation_lines(report: dict[str, Any]) -> list[str]:
    """The rules the domain text was normalised by for the tokenizer, and what they found (Markdown lines)."""
    rules = report.get("normalisation_rules")
    if not rules:
        return []
    lines = ["The domain text was normalised as the model's tokenizer writes (`pipeline/lm/text.py`):", ""]
    lines += [f"- {rule}" for rule in rules]
    if report.get("recased"):
        lines += ["- written in one case, so lowercased with a capital at each line's start: "
                  + ", ".join(f"`{name}`" for name in report["recased"])]
    if report.get("tokenizer_punctuation") and not report.get("punctuated"):
        lines += [f"- the tokenizer writes punctuation ({' '.join(report['tokenizer_punctuation'])}) but the text "
                  "holds none: the LM has never seen the model's punctuation tokens and scores them as unseen; text "
                  "punctuated as the model writes serves it better"]
    return lines + [""]


def scoring_line() -> str:
    """What the report's WER and CER figures are."""
    from pipeline.reports.scoring import NORMALISED, WRITTEN

    return (f"WER and CER are given normalised, then as written in brackets: {NORMALISED}; {WRITTEN}. Weights "
            "and strategies are chosen on the normalised figures.")


def plot_dev_wer(report: dict[str, Any]) -> bytes:
    """PNG: dev WER against the LM weight per strategy, without boosting (CTC beam at its chosen insertion bonus)."""
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    for r in report["strategies"]:
        bonus = r["unboosted"]["bonus"]
        points = sorted((t["lm_weight"], t["wer"]) for t in r["trials"] if not t["boost_weight"]
                        and (t["lm_weight"] == 0 or bonus is None or t["bonus"] == bonus))
        label = r["name"] + (f" (bonus {bonus:g})" if bonus is not None else "")
        axes.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    return png(figure, axes, "LM weight (0: no LM)", "dev WER (normalised), %", "Dev WER against the LM weight")


def plot_dev_wer_boost(report: dict[str, Any]) -> bytes:
    """PNG: dev WER against the boost weight per strategy, at the LM setting chosen without boosting."""
    from pipeline.reports.plots import new_plot, png

    figure, axes = new_plot()
    for r in report["strategies"]:
        at = r["unboosted"]
        points = sorted((t["boost_weight"], t["wer"]) for t in r["trials"]
                        if (t["lm_weight"], t["bonus"]) == (at["lm_weight"], at["bonus"]))
        label = r["name"] + (f" ({setting_text(at)})" if at["lm_weight"] else "")
        axes.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    return png(figure, axes, "boost weight (0: no boosting)", "dev WER (normalised), %",
               "Dev WER against the boost weight")
