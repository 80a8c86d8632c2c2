"""base/tokens.py: a tokenizer's tokens as text, and the words its pieces make."""

from attncli.base.tokens import readable, style, words


def test_byte_level_tokens_read_as_text():
    assert readable(["The", "Ġit", "Ġ", "Ċ", "Ã©", "Ġsc", "oot"]) == ["The", "it", "␣", "\n", "é", "sc", "oot"]
    assert style(["Ġit"]) == "bytes"


def test_sentencepiece_tokens_and_byte_tokens_read_as_text():
    assert readable(["▁it", "<0x0A>", "▁sc", "oot"]) == ["it", "\n", "sc", "oot"]


def test_labels_a_person_wrote_are_unchanged():
    for labels in (["it", "they"], ["a b", "é"], ["#", "##"], ["Ã©"]):
        assert readable(labels) == labels
    assert style(["it", "##"]) is None


def test_words_by_stored_word_ids_and_by_marks():
    bert = ["[CLS]", "the", "sc", "##oot", "##er", "it", "[SEP]"]
    assert words(bert, [None, 0, 1, 1, 1, 2, None]) == [("[CLS]", [0]), ("the", [1]), ("scooter", [2, 3, 4]),
                                                        ("it", [5]), ("[SEP]", [6])]
    assert words(bert) == words(bert, [None, 0, 1, 1, 1, 2, None])
    assert words(["The", "Ġsc", "oot", "er", "Ġit", "."]) == [("The", [0]), ("scooter", [1, 2, 3]), ("it", [4]),
                                                              (".", [5])]
    assert words(["▁The", "▁sc", "oot", "▁it"]) == [("The", [0]), ("scoot", [1, 2]), ("it", [3])]
    assert words(["a", "b"], [None, None]) == [("a", [0]), ("b", [1])]  # null word ids: each alone
