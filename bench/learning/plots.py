"""Curves of the learning benchmark: training reward, validation top-1 and answers per sample against sampled
responses, one colour per arm, one line per seed; and the SFT stage's validation accuracy against examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"aepo": "tab:blue", "grpo": "tab:orange", "aepo_no_collinear": "tab:red"}
STYLES = {"aepo_no_collinear": "--"}  # dashed: it often runs identical updates to aepo and would hide it
SMOOTH = 10
"""Updates in the trailing moving average of the per-update curves (sampled hit rate, points per response)."""


def _smooth(values: list[float], window: int = SMOOTH) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - window + 1): i + 1] if v == v]  # skip nan
        out.append(sum(chunk) / len(chunk) if chunk else float("nan"))
    return out


def plot_curves(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    ax_sft, ax_reward, ax_acc, ax_answers = axes
    labelled: set[str] = set()  # one legend entry per arm, on the first seed that ran it
    for s in data["seeds"]:
        c = s["sft"]["curve"]
        ax_sft.plot([p["examples"] for p in c], [p["val_accuracy"] for p in c], color="gray", alpha=0.8,
                    label=f"seed {s['seed']}")
        for arm, a in s["arms"].items():
            colour, style = COLOURS.get(arm, "black"), STYLES.get(arm, "-")
            label = None if arm in labelled else arm
            labelled.add(arm)
            pts = [p for p in a["curve"] if p["step"] > 0]
            ax_reward.plot([p["samples"] for p in pts], _smooth([p["sample_top1"] for p in pts]), color=colour,
                           linestyle=style, alpha=0.8, label=label)
            val = [p for p in a["curve"] if "val_accuracy" in p]
            ax_acc.plot([p["samples"] for p in val], [p["val_accuracy"] for p in val], color=colour, marker="o",
                        linestyle=style, alpha=0.8, label=label)
            ax_answers.plot([p["samples"] for p in pts], _smooth([p["answers_per_sample"] for p in pts]),
                            color=colour, linestyle=style, alpha=0.8, label=label)
    for lo in (0.3, 0.6):
        ax_sft.axhline(lo, color="gray", linestyle=":", linewidth=1)
    ax_sft.set(title="SFT: validation top-1 (greedy)", xlabel="training examples", ylabel="accuracy")
    ax_reward.set(title=f"RL: top-1 hit of sampled responses (T=1, mean of {SMOOTH} updates)",
                  xlabel="sampled responses", ylabel="share")
    ax_acc.set(title="RL: validation top-1 (greedy)", xlabel="sampled responses", ylabel="accuracy")
    ax_answers.set(title=f"RL: points per sampled response (mean of {SMOOTH} updates)", xlabel="sampled responses",
                   ylabel="answers", ylim=(0.9, max(2.1, ax_answers.get_ylim()[1])))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
