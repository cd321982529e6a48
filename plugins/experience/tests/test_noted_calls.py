"""The skill miner's notes on a tool-calling task (no valid actions; the actions are calls as JSON): a case's
call, its argument values re-taken from this episode (notes/observe.py ``refilled``)."""
import json

from evolver_experience.notes import observe


def test_a_noted_call_takes_its_argument_values_from_this_episode_where_the_case_took_its_own():
    """No valid actions (a tool-calling task): the note is a case's call, its values re-taken from this
    episode: what followed the same words in the task (the bill's file) or the observation (``recipient:``)."""
    from evolver_experience.mining import Case, encode

    task = "Can you please pay the bill 'bill-december-2023.txt' for me?"
    seen = "- amount: 98.7\n  recipient: GB29NWBK60161331926819\n  subject: Car Rental\n  date: 2022-01-01"
    read = json.dumps({"name": "read_file", "arguments": {"file_path": "bill-december-2023.txt"}})
    pay = json.dumps({"name": "send_money", "arguments": {"recipient": "GB29NWBK60161331926819", "amount": 98.7,
                                                          "subject": "Car Rental", "date": "2022-03-01"}})
    cases = [Case(observe.task_text(task), "", "", read, 1.0, observe.codes(read, (task, "", "", ""))),
             Case(observe.task_text(task), seen, read, pay, 1.0, observe.codes(pay, (task, seen, read, "")))]
    data = observe.loaded(encode(cases))
    new = "Can you please pay the bill 'bill-february-2024.txt' for me?"
    first = observe.note(new, None, data)
    assert first == 'Next: {"name": "read_file", "arguments": {"file_path": "bill-february-2024.txt"}}.'
    after = new + "\n> " + json.loads(first[6:-1])["name"] + "\n- amount: 12.5\n  recipient: DE8937040044\n  subject: Phone bill"
    call = json.loads(observe.note(after, None, data)[6:-1])
    # the date followed nothing the episode shows: it stays the case's (a harness sees it is not grounded)
    assert call["arguments"] == {"recipient": "DE8937040044", "amount": 12.5, "subject": "Phone bill", "date": "2022-03-01"}
    assert observe.note(new, ["look"], data) == ""  # valid actions listed: the text-game path, no call to refill
    # the second record's value comes from this episode's second record
    assert observe.after_same_words("B2", "- id: A1\n- id: B2\n", "- id: X9\n- id: Y8\n") == "Y8"
    assert observe.after_same_words("A1", "- id: A1\n- id: B2\n", "- id: X9\n") == "X9"
