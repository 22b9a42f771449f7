"""The notes for texts longer than the context: one per text for the first few, one line for the rest
(a 1,319-item sweep of a 128-token canary printed 3,081 notes before)."""

from blackbox_mia.text.windows import NOTED_TEXTS, sliding_windows, windows_notes


def test_every_text_fits_or_no_context_gives_no_note():
    assert windows_notes([5, 64, 10], 64) == []
    assert windows_notes([500], None) == []


def test_the_first_long_texts_get_a_note_each_and_the_rest_one_line():
    lengths = [10, 200, 65, 30, 129, 1000, 300, 64]  # long: #1, #2, #4, #5, #6 (context 64)
    notes = windows_notes(lengths, 64)
    assert NOTED_TEXTS == 3 and len(notes) == 4
    assert notes[0] == ("note: text #1 is 200 tokens, longer than the context (64): scored in "
                        f"{len(sliding_windows(200, 64))} sliding windows (progress below in tokens)")
    assert notes[2].startswith("note: text #4 is 129 tokens")
    rest = len(sliding_windows(1000, 64)) + len(sliding_windows(300, 64))  # texts #5 and #6
    assert rest == 31 + 9
    assert notes[3] == f"note: 2 more texts of 8 are longer than the context (64): scored in {rest} sliding windows in all"
