"""Environments with verifiable checks, and the episode / step records that runs write and training reads."""

from envs.records import EpisodeRecord, Outcome, StepRecord
from envs.tasks import TaskVerdict

__all__ = ["EpisodeRecord", "Outcome", "StepRecord", "TaskVerdict"]
