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


def test_the_notes_count_the_callers_texts_not_the_variants_the_scorers_add(tiny_model_dir, capsys):
    """Issue 51, item 8: one long text scored with lowercase and PAC (which score variants of it)
    was noted as "text #0 ... / 3 more texts of 6"; the notes count the texts given."""
    from blackbox_mia import score_texts
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    long_text = "Tom has 3 apples and Ann has 5 more than Tom has. " * 12  # > 64 tokens (the context)
    texts = ["Tom has 3 apples.", long_text, "Ann has 5 pears.", long_text.upper()]
    with LocalBackend(LocalConfig(str(tiny_model_dir))) as local:
        lengths = local.sequence_lengths(texts)
        assert lengths == [len(local.full_ids(local.encode(t))) for t in texts]
        assert lengths[0] < 64 < lengths[1] and lengths[2] < 64 < lengths[3]
        score_texts(texts, "loss,lowercase,pac", {"target": local}, progress=True)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: text #1 is {lengths[1]} tokens, longer than the context (64): scored in "
        f"{len(sliding_windows(lengths[1], 64))} sliding windows (progress below in tokens)",
        f"note: text #3 is {lengths[3]} tokens, longer than the context (64): scored in "
        f"{len(sliding_windows(lengths[3], 64))} sliding windows (progress below in tokens)",
    ]


def test_the_api_backend_counts_the_tokens_it_sends(tiny_model_dir, tmp_path):
    """Through an API the lengths are the tracker's sequences: BOS only when prompts go as ids."""
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    texts = ["Tom has 3 apples.", "Tom has 3 apples and Ann has 5 more than Tom has. " * 12]
    with LocalBackend(LocalConfig(str(tiny_model_dir))) as local:
        tokens = [len(local.encode(t)) for t in texts]
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        api = ApiBackend(ApiConfig(base_url=url, model=str(tiny_model_dir), api_key="none"),
                         tokenizer=str(tiny_model_dir), cache_dir=tmp_path)
        try:
            lengths = api.sequence_lengths(texts)
            bos = int(api.codec.bos_id is not None and api.capabilities.token_id_prompts)
            assert api.context == 64
        finally:
            api.close()
    assert lengths == [n + bos for n in tokens]


def test_a_reference_models_notes_say_whose_they_are(tiny_model_dir, capsys):
    from blackbox_mia import score_texts
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    texts = ["Tom has 3 apples.", "Tom has 3 apples and Ann has 5 more than Tom has. " * 12]
    with LocalBackend(LocalConfig(str(tiny_model_dir))) as target, LocalBackend(LocalConfig(str(tiny_model_dir))) as ref:
        n = target.sequence_lengths(texts)[1]
        score_texts(texts, "loss,ref", {"target": target, "reference": ref}, progress=True)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note")]
    windows = len(sliding_windows(n, 64))
    assert notes == [f"note: text #1 is {n} tokens, longer than the context (64): scored in {windows} sliding windows "
                     "(progress below in tokens)",
                     f"note (reference model): text #1 is {n} tokens, longer than the context (64): scored in {windows} "
                     "sliding windows (progress below in tokens)"]
