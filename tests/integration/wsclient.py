"""JSON-RPC 2.0 over the WebSocket API, as the tests' TrueNAS-style clients
call it (lib.sh puts this directory on PYTHONPATH). URL comes from the
environment; tests add their own error helpers by subclassing."""
import json
import os

import websocket


class Client:
    def __init__(self, timeout=60):
        self.ws = websocket.create_connection(os.environ["URL"], timeout=timeout)
        self.n = 0

    def call(self, method, *params):
        self.n += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                 "params": list(params)}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == self.n:
                return r

    def ok(self, method, *params):
        r = self.call(method, *params)
        assert "result" in r, (method, params, r)
        return r["result"]
