"""Model, tokenizer and generation against the CLI and against the library's own evaluation."""

import numpy as np
import pytest

import lowbit
from conftest import run_cli_json


@pytest.fixture(scope="module")
def model(model_path):
    return lowbit.Model.load(model_path, threads=2)


def test_config_and_tokenizer(model):
    c = model.config
    assert c["architecture"] == "LlamaForCausalLM" and c["vocab_size"] == model.tokenizer.vocab_size
    ids = model.tokenizer.encode("And God said, Let there be light")
    assert ids[0] == model.tokenizer.bos_id
    assert model.tokenizer.decode(ids[1:]) == "And God said, Let there be light"
    assert model.tokenizer.encode("light", add_bos=False) == ids[-1:] or len(ids) > 1


def test_logits_are_a_fresh_sequence_at_every_position(model):
    ids = model.tokenizer.encode("In the beginning God created")
    logits = model.logits(ids)
    assert logits.shape == (len(ids), model.config["vocab_size"]) and logits.dtype == np.float32
    # causal: the logits of a prefix are the first rows of the whole sequence's
    np.testing.assert_allclose(model.logits(ids[:3]), logits[:3], rtol=1e-5, atol=1e-5)
    assert model.logits(np.array(ids, dtype=np.int64)).tobytes() == logits.tobytes()


def test_logits_refuse_bad_tokens(model):
    with pytest.raises(lowbit.Error, match="outside the vocabulary"):
        model.logits([1, model.config["vocab_size"]])
    with pytest.raises(lowbit.Error, match="no tokens"):
        model.logits([])


def test_generate_is_an_iterator_matching_the_cli(model, model_path):
    gen = model.generate("And God said", max_tokens=12)
    tokens = list(gen)
    assert 0 < len(tokens) <= 12 and all(isinstance(t, lowbit.Token) for t in tokens)
    cli = run_cli_json("generate", "--model", model_path, "--prompt", "And God said", "-n", "12")
    assert "".join(t.text for t in tokens) == cli["text"] == gen.result["text"]
    assert gen.result["generated_tokens"] == cli["generated_tokens"] == len(tokens)


def test_missing_model_is_a_lowbit_error(tmp_path):
    with pytest.raises(lowbit.Error, match="nothing-here"):
        lowbit.Model.load(tmp_path / "nothing-here")


def test_paths_may_be_path_objects(model_path):
    import pathlib

    folder = pathlib.Path(model_path)
    tokenizer = lowbit.Tokenizer.load(folder)
    model = lowbit.Model.load(folder, tokenizer=folder / "tokenizer.model", threads=1)
    assert model.tokenizer.encode("And God") == tokenizer.encode("And God")
