"""Image parts: the Qwen3-VL renderers' chunks, token counts against the real image processor,
weights, datums with images, and the errors for images where they cannot go."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from PIL import Image, ImageDraw
from renderer_cases import decode_text
from transformers import AutoImageProcessor, PreTrainedTokenizerBase

from adapters.common.tiny import EMBEDDED_MODELS, TINY_VL_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.ports import Tokenizer
from kitchen.families.supervised.examples import Conversation
from train_core.renderers.errors import RendererError
from train_core.renderers.images import ImagePartError, VisionSpec, data_url, image_chunk, image_of_part, load_image
from train_core.renderers.messages import MessageFormatError, check_messages
from train_core.renderers.registry import get_renderer, recommended_renderer, renderer_takes_images
from train_core.supervised import datum_from_model_input
from train_core.types import EncodedTextChunk, ImageChunk, ModelInput


@pytest.fixture(scope="module")
def vl_tokenizer() -> PreTrainedTokenizerBase:
    tokenizer = load_tokenizer(TINY_VL_MODEL_NAME)
    assert isinstance(tokenizer, PreTrainedTokenizerBase)
    return tokenizer


def picture(width: int = 40, height: int = 30, colour: str = "red") -> Image.Image:
    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).ellipse((2, 2, width - 3, height - 3), fill=colour)
    return image


def ask(image: Any, question: str = "What colour?") -> list[Any]:
    return [{"type": "image", "image": image}, {"type": "text", "text": question}]


@pytest.mark.parametrize(
    ("size", "max_pixels"),
    [((40, 30), None), ((64, 64), None), ((300, 500), None), ((1000, 90), None), ((900, 700), 200_000)],
)
def test_image_tokens_equal_the_qwen_vl_image_processor_count(size: tuple[int, int], max_pixels: int | None) -> None:
    spec = VisionSpec() if max_pixels is None else VisionSpec(max_pixels=max_pixels)
    processor = AutoImageProcessor.from_pretrained(
        EMBEDDED_MODELS[TINY_VL_MODEL_NAME], size={"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels}
    )
    grid = processor(images=[picture(*size)], return_tensors="pt")["image_grid_thw"][0].tolist()
    assert spec.image_tokens(size[1], size[0]) == grid[0] * grid[1] * grid[2] // 4


def test_user_images_render_between_vision_tokens(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("qwen3_vl_instruct", vl_tokenizer)
    messages: list[Any] = [
        {"role": "user", "content": [*ask(picture(), "Which?"), {"type": "image", "image": picture(64, 64, "blue")}]},
        {"role": "assistant", "content": "red"},
    ]
    model_input, weights = renderer.build_supervised_example(messages)
    kinds = [type(chunk) for chunk in model_input.chunks]
    assert kinds == [EncodedTextChunk, ImageChunk, EncodedTextChunk, ImageChunk, EncodedTextChunk]
    first, second = model_input.images
    assert (first.expected_tokens, second.expected_tokens) == (VisionSpec().image_tokens(30, 40), 64)
    ids = model_input.token_ids(-1)
    start, end = cast(list[int], vl_tokenizer.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>"]))
    begin = ids.index(-1)
    assert ids[begin - 1] == start and ids[begin + first.expected_tokens] == end
    pad_id = cast(int, vl_tokenizer.convert_tokens_to_ids("<|image_pad|>"))
    text = vl_tokenizer.decode([t if t >= 0 else pad_id for t in ids])
    pads = "<|image_pad|>"
    assert text == (
        f"<|im_start|>user\n<|vision_start|>{pads * first.expected_tokens}<|vision_end|>Which?"
        f"<|vision_start|>{pads * 64}<|vision_end|><|im_end|>\n<|im_start|>assistant\nred<|im_end|>"
    )
    assert len(weights) == model_input.length
    assert all(w == 0 for w, t in zip(weights, ids, strict=True) if t == -1)
    assert vl_tokenizer.decode([t for w, t in zip(weights, ids, strict=True) if w]) == "red<|im_end|>"


def test_without_images_qwen3_vl_renders_qwen3s_text(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "thinking": "greet"},
    ]
    parts: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "H"}, {"type": "text", "text": "i"}]}]
    instruct, text_instruct = (get_renderer(n, vl_tokenizer) for n in ("qwen3_vl_instruct", "qwen3_instruct"))
    assert instruct.build_supervised_example(messages) == text_instruct.build_supervised_example(messages)
    assert instruct.build_generation_prompt(parts) == text_instruct.build_generation_prompt(messages[:1])
    thinking, text_thinking = (get_renderer(n, vl_tokenizer) for n in ("qwen3_vl", "qwen3"))
    example = thinking.build_supervised_example(messages)[0].to_ints()
    qwen3_example = text_thinking.build_supervised_example(messages)[0].to_ints()
    assert decode_text(vl_tokenizer, example) == decode_text(vl_tokenizer, qwen3_example)
    prompt = thinking.build_generation_prompt(parts).to_ints()
    qwen3_prompt = text_thinking.build_generation_prompt(messages[:1]).to_ints()
    assert decode_text(vl_tokenizer, prompt) == decode_text(vl_tokenizer, qwen3_prompt) + "<think>\n"


def test_qwen3_vl_thinking_prompt_opens_the_think_block(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    """Regression (issue 46): the Qwen3-VL Thinking template's generation prompt ends with
    `<|im_start|>assistant\n<think>\n`; the reply's example extends it and trains what follows."""
    renderer = get_renderer("qwen3_vl", vl_tokenizer)
    messages: list[Any] = [
        {"role": "user", "content": ask(picture(), "Which?")},
        {"role": "assistant", "content": "Red.", "thinking": "It is red."},
    ]
    prompt = renderer.build_generation_prompt(messages[:1])
    assert decode_text(vl_tokenizer, prompt.token_ids(0)).endswith("<|im_end|>\n<|im_start|>assistant\n<think>\n")
    example, weights = renderer.build_supervised_example(messages)
    ids = example.token_ids(0)
    assert ids[: prompt.length] == prompt.token_ids(0)
    trained = [t for w, t in zip(weights, ids, strict=True) if w]
    assert vl_tokenizer.decode(trained) == "It is red.\n</think>\n\nRed.<|im_end|>"
    assert renderer.parse_response(ids[prompt.length :]) == (
        {"role": "assistant", "content": "Red.", "thinking": "It is red."},
        True,
    )
    call = renderer.tool_call_prefill("get_weather")
    assert call.startswith("\n</think>\n\n<tool_call>\n")


def test_generation_prompt_and_reply_parse(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("qwen3_vl_instruct", vl_tokenizer)
    messages: list[Any] = [{"role": "user", "content": ask(picture())}, {"role": "assistant", "content": "red"}]
    prompt = renderer.build_generation_prompt(messages[:1])
    full, _ = renderer.build_supervised_example(messages)
    assert full.token_ids(0)[: prompt.length] == prompt.token_ids(0) and full.images == prompt.images
    reply = full.token_ids(0)[prompt.length :]
    assert renderer.parse_response(reply) == ({"role": "assistant", "content": "red"}, True)


def test_images_load_from_pil_path_and_data_url(tmp_path: Path) -> None:
    image = picture()
    path = tmp_path / "p.png"
    image.save(path)
    chunks = [
        image_chunk(source, VisionSpec()) for source in (image, path, str(path), f"file://{path}", data_url(image))
    ]
    chunks.append(
        image_chunk(image_of_part({"type": "image_url", "image_url": {"url": data_url(image)}}), VisionSpec())
    )
    assert len({chunk.data for chunk in chunks}) == 1
    assert load_image(chunks[0].data).tobytes() == image.tobytes()  # PNG: the same pixels


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("https://example.com/cat.png", "remote URLs are not fetched"),
        ("/no/such/file.png", "does not exist"),
        ("data:image/png;base64,@@@", "not valid base64"),
        ("data:image/png;base64,aGVsbG8=", "not an image format"),
        (3, "must be a PIL image, a file path or a data: URL"),
    ],
)
def test_unreadable_images_are_named(source: object, message: str) -> None:
    with pytest.raises(ImagePartError, match=message):
        image_chunk(source, VisionSpec())


def test_images_outside_user_messages_are_refused(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("qwen3_vl", vl_tokenizer)
    for role in ("system", "assistant"):
        with pytest.raises(MessageFormatError, match=f"message 0 \\(role '{role}'\\) holds an image"):
            renderer.build_generation_prompt([cast(Any, {"role": role, "content": ask(picture())})])


def test_image_parts_are_checked_only_where_a_renderer_takes_them() -> None:
    messages: list[Any] = [{"role": "user", "content": ask(picture())}]
    with pytest.raises(MessageFormatError, match="image parts need a vision-language renderer"):
        check_messages(messages)
    assert check_messages(messages, images=True) == messages
    with pytest.raises(MessageFormatError, match=r"'content'\[0\] is an image part without an 'image'"):
        check_messages([{"role": "user", "content": [{"type": "image"}]}], images=True)
    with pytest.raises(MessageFormatError, match=r"'content'\[0\] must be a"):
        check_messages([{"role": "user", "content": [{"type": "audio"}]}], images=True)
    assert renderer_takes_images("qwen3_vl") and not renderer_takes_images("qwen3")
    assert recommended_renderer("tiny-vl") == "qwen3_vl_instruct"
    assert recommended_renderer("Qwen/Qwen3-VL-8B-Instruct") == "qwen3_vl_instruct"
    assert recommended_renderer("Qwen/Qwen3-VL-8B-Thinking") == "qwen3_vl"


def test_a_text_renderer_refuses_images_in_a_supervised_record(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    record = {"messages": [{"role": "user", "content": ask(picture())}, {"role": "assistant", "content": "red"}]}
    with pytest.raises(RendererError, match="hold images, which renderer Qwen3Renderer cannot render"):
        Conversation(images=True)(record, cast(Tokenizer, vl_tokenizer), get_renderer("qwen3", vl_tokenizer))


def test_datum_with_an_image_shifts_around_it(vl_tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("qwen3_vl_instruct", vl_tokenizer)
    messages: list[Any] = [{"role": "user", "content": ask(picture())}, {"role": "assistant", "content": "red"}]
    model_input, weights = renderer.build_supervised_example(messages)
    datum = datum_from_model_input(model_input, weights)
    ids = model_input.token_ids(0)
    assert datum.model_input.length == model_input.length - 1 and datum.model_input.images == model_input.images
    assert datum.model_input.token_ids(0) == ids[:-1]
    assert list(datum.loss_fn_inputs["target_tokens"].data) == ids[1:]
    assert list(datum.loss_fn_inputs["weights"].data) == weights[1:]
    image_start = model_input.chunks[0].length
    cut = datum_from_model_input(model_input, weights, max_length=image_start + 2)  # the image does not fit
    assert cut.model_input.images == () and cut.model_input.length == image_start - 1


def test_model_input_with_images_has_no_plain_token_ids() -> None:
    model_input = ModelInput((EncodedTextChunk((1, 2)), ImageChunk(b"png", "png", 3), EncodedTextChunk((4,))))
    assert model_input.length == 6 and model_input.token_ids(9) == [1, 2, 9, 9, 9, 4]
    with pytest.raises(ValueError, match="holds 1 image chunk"):
        model_input.to_ints()
    with pytest.raises(ValueError, match="at least one position"):
        ImageChunk(b"png", "png", 0)
