"""vlm_classifier: image classification by chat on a vision-language model. Each example is a
picture and a question; the model learns to answer with the class (by default: the colour of a
shape, on the embedded `tiny-vl` model, which learns it on a CPU in a few minutes). Training is
supervised on the answer; the `jsonl` eval task samples answers to the held-out pictures and
reports their accuracy (`eval/classes/accuracy`). Data: prompt-completion records whose user
message holds image parts (PIL image, file path or data URL) and an `answer`; see
`recipes/data/vlm_classifier/generate.py`."""

from __future__ import annotations

from kitchen import (
    ConfigError,
    DataSettings,
    HeldOutEval,
    OptimizerSettings,
    Recipe,
    Workflow,
    defaults,
    image_renderer_names,
    renderer_name,
    renderer_takes_images,
)
from kitchen.families.supervised import ChatSupervisedSettings, Conversation, supervised_workflow
from recipes.data import shipped_data
from train_core.renderers.train_on_what import TrainOnWhat

TEST = shipped_data("vlm_classifier/test.jsonl")
CLASSES = {
    "task": "jsonl",
    "name": "classes",
    "every": 6,
    "temperature": 0.0,
    "max_tokens": 4,
    "settings": {"dataset": TEST, "grader": "exact"},
}


@defaults(
    model_name="tiny-vl",
    data=DataSettings(
        dataset=shipped_data("vlm_classifier/train.jsonl"), eval_dataset=TEST, batch_size=16, num_epochs=4
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
    eval=HeldOutEval.model_validate({"every": 6, "tasks": [CLASSES]}),
)
class Config(ChatSupervisedSettings):
    pass


def workflow(config: Config) -> Workflow:
    if not renderer_takes_images(renderer_name(config)):
        raise ConfigError(
            f"renderer {renderer_name(config)!r} takes no images; vlm_classifier needs a vision-language renderer "
            f"({', '.join(image_renderer_names())}) and model"
        )
    return supervised_workflow(Conversation(TrainOnWhat.LAST_ASSISTANT_MESSAGE, images=True), needs_renderer=True)


RECIPE = Recipe(
    name="vlm_classifier",
    description="image classification by chat on a vision-language model (pictures in, class names out)",
    config_cls=Config,
    workflow=workflow,
)
