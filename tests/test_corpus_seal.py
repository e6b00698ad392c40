"""The seal of corpus.json: a property of its values, not of its formatting, and checked on open."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder_shell.corpus.store import Corpus, seal
from decoder_shell.errors import CorpusError

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6), st.text(max_size=8),
                    st.floats(allow_nan=False, allow_infinity=False))


def leaves(v, prefix=()):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from leaves(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from leaves(x, prefix + (i,))
    else:
        yield prefix


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_seal_changes_exactly_when_a_value_changes(tiny_corpus, data):
    doc = json.loads((tiny_corpus / "corpus.json").read_text())
    assert seal(doc) == doc["digest"]
    path = data.draw(st.sampled_from([p for p in leaves(doc) if p and p[0] != "digest"]))
    value = data.draw(SCALARS)
    edited = copy.deepcopy(doc)
    node = edited
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    same = json.dumps(edited, sort_keys=True) == json.dumps(doc, sort_keys=True)
    assert (seal(edited) == doc["digest"]) == same
    indent = data.draw(st.sampled_from([None, 0, 1, 4]))
    assert seal(json.loads(json.dumps(doc, indent=indent))) == doc["digest"]  # formatting is not content


def test_reformatted_corpus_json_still_opens_and_an_edited_one_does_not(corpus_copy):
    path = corpus_copy / "corpus.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc, indent=4, sort_keys=False))
    assert Corpus.open(corpus_copy).sealed
    doc["rebased"] = True
    path.write_text(json.dumps(doc))
    with pytest.raises(CorpusError, match="corpus.json was modified"):
        Corpus.open(corpus_copy)
