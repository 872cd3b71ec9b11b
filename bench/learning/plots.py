"""Curves of the learning benchmark: training reward, validation top-1 and answers per sample against sampled
responses, one colour per arm, one line per seed; and the SFT stage's validation accuracy against examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"aepo": "tab:blue", "grpo": "tab:orange", "aepo_no_collinear": "tab:red"}


def plot_curves(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    ax_sft, ax_reward, ax_acc, ax_answers = axes
    for s in data["seeds"]:
        c = s["sft"]["curve"]
        ax_sft.plot([p["examples"] for p in c], [p["val_accuracy"] for p in c], color="gray", alpha=0.8,
                    label=f"seed {s['seed']}")
        for arm, a in s["arms"].items():
            colour = COLOURS.get(arm, "black")
            label = arm if s is data["seeds"][0] else None
            pts = [p for p in a["curve"] if p["step"] > 0]
            ax_reward.plot([p["samples"] for p in pts], [p["sample_top1"] for p in pts], color=colour, alpha=0.7,
                           label=label)
            val = [p for p in a["curve"] if "val_accuracy" in p]
            ax_acc.plot([p["samples"] for p in val], [p["val_accuracy"] for p in val], color=colour, marker="o",
                        alpha=0.8, label=label)
            ax_answers.plot([p["samples"] for p in pts], [p["answers_per_sample"] for p in pts], color=colour,
                            alpha=0.7, label=label)
    for lo in (0.3, 0.6):
        ax_sft.axhline(lo, color="gray", linestyle=":", linewidth=1)
    ax_sft.set(title="SFT: validation top-1 (greedy)", xlabel="training examples", ylabel="accuracy")
    ax_reward.set(title="RL: top-1 hit of sampled responses (T=1)", xlabel="sampled responses", ylabel="share")
    ax_acc.set(title="RL: validation top-1 (greedy)", xlabel="sampled responses", ylabel="accuracy")
    ax_answers.set(title="RL: points per sampled response", xlabel="sampled responses", ylabel="answers")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
