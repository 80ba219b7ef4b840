"""toolgate's agent API from Python: get a governed tool view, propose calls, follow them,
approve them, read their artifacts.

    from toolgate import Client
    tg = Client("127.0.0.1:7070", token=os.environ["TOOLGATE_TOKEN"])
    tools = tg.view("fix the failing serializer test", format="openai").tools  # to the model
    call = tg.propose("file.read", {"path": "src/serializer.ts"}, action_type="read",
                      task="read the serializer")
    done = tg.wait(call.id)               # or: for event in tg.watch(call.id): ...
    print(done.phase, done.output_preview)

Every error is a ToolgateError carrying the server's stable reason code (`approval-self`,
`args-invalid`, …) and, for bad input, the field at fault.
"""

from .client import Call, Client, Event, ToolgateError, View

__all__ = ["Call", "Client", "Event", "ToolgateError", "View"]
