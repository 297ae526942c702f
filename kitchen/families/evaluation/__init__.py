"""Evaluation during training and the built-in eval tasks: graders, generation and grading of
items, results files, and opening the model under test.

The public names for writing eval tasks (the shipped recipes' `recipes/evals.py` uses them): the
task interface is the engine's (`kitchen.engine.eval_tasks`), the building blocks are here."""

from kitchen.engine.eval_tasks import EvalModel as EvalModel
from kitchen.engine.eval_tasks import EvalSettings as EvalSettings
from kitchen.engine.eval_tasks import EvalTask as EvalTask
from kitchen.engine.eval_tasks import SampleRecord as SampleRecord
from kitchen.engine.eval_tasks import TaskResult as TaskResult
from kitchen.families.evaluation.generation import JOURNAL as JOURNAL
from kitchen.families.evaluation.generation import Grade as Grade
from kitchen.families.evaluation.generation import Item as Item
from kitchen.families.evaluation.generation import Journal as Journal
from kitchen.families.evaluation.generation import evaluate_generation as evaluate_generation
from kitchen.families.evaluation.generation import strip_thinking as strip_thinking
from kitchen.families.evaluation.generation import summarise as summarise
from kitchen.families.evaluation.graders import Grader as Grader
from kitchen.families.evaluation.graders import exact_grader as exact_grader
from kitchen.families.evaluation.graders import math_grader as math_grader
from kitchen.families.evaluation.hub import HubDataset as HubDataset
from kitchen.families.evaluation.hub import hub_file as hub_file
from kitchen.families.evaluation.hub import load_rows as load_rows
from kitchen.families.evaluation.hub import require as require
from train_core.eval_stats import Estimate as Estimate
from train_core.eval_stats import mean_with_stderr as mean_with_stderr
