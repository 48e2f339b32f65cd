#!/usr/bin/env python3
"""What `tq serve --cache-dir` saves: time to first token of a long prompt asked again after
a restart, from the folder, against the same prompt prefilled fresh.

    python3 bench/serve_cache_dir.py --tq build/tq --model smollm2-135m [--kv turbo3] \\
        [--prompt-tokens 2000] [-t 2] [--reps 3]

It makes a prompt of about N tokens from ../shared/data/wikitext-2-raw-test.txt (a generated
text when that is absent), then, in a fresh temporary folder:

  1. starts `tq serve --cache-dir DIR` and asks the prompt (max_tokens 1): the fresh prefill's
     time to first token; stops the server (SIGTERM: the kept prompt is written to DIR);
  2. starts it again on DIR and asks the prompt with a few words appended: the kept prompt is
     loaded from the folder and only the new words are prefilled;
  3. for reference, asks the same appended prompt of a server without --cache-dir.

Each of 2 and 3 is repeated --reps times (a new server each time; the folder kept) and the
median is printed, with the file's size and the server's cache-dir counters. Greedy answers of
2 and 3 are compared (they must be equal). Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import HOST, ROOT, free_port  # noqa: E402  (the load test's helpers)


class Server:
    def __init__(self, args, extra):
        self.port = free_port()
        cmd = [args.tq, "serve", "-m", args.model, "--kv", args.kv, "-t", str(args.threads), "-c",
               str(args.ctx), "--host", HOST, "--port", str(self.port)] + extra
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        self.lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.p.stderr.readline().decode("utf-8", "replace")
            if not line:
                raise RuntimeError("tq serve exited: %s" % "".join(self.lines[-5:]))
            self.lines.append(line)
            if "listening on http://" in line:
                return
        raise RuntimeError("tq serve did not start")

    def ask(self, prompt):
        c = http.client.HTTPConnection(HOST, self.port, timeout=600)
        body = json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True})
        t0 = time.monotonic()
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
        ttft, text = None, ""
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            piece = json.loads(line[6:])["choices"][0]["text"]
            if ttft is None:  # the first event: the first token, or the end when it is a stop
                ttft = time.monotonic() - t0
            text += piece
        c.close()
        return ttft, text

    def metrics(self):
        c = http.client.HTTPConnection(HOST, self.port, timeout=30)
        c.request("GET", "/metrics")
        out = {}
        for line in c.getresponse().read().decode().splitlines():
            m = re.match(r"^(tq_\w+) ([0-9.e+-]+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        c.close()
        return out

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(60)
        # drain the rest of stderr so the child never blocks on a full pipe
        self.lines += self.p.stderr.read().decode("utf-8", "replace").splitlines(True)


def make_prompt(n_tokens):
    path = os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw-test.txt")
    if os.path.exists(path):
        text = open(path, encoding="utf-8").read()
    else:
        text = " ".join("sentence %d of a generated text about rivers and printing." % i for i in range(20000))
    return text[: n_tokens * 4]  # about 4 characters per token on these tokenizers


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tq", default=os.path.join(ROOT, "build", "tq"))
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--kv", default="turbo3")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    prompt = make_prompt(args.prompt_tokens)
    question = "\n\nThe main subject of the text above is"
    d = tempfile.mkdtemp(prefix="tq_cache_dir_bench_")
    try:
        # --prefix-cache large enough to keep the whole prompt raw
        extra = ["--cache-dir", d, "--prefix-cache", "1024"]
        s = Server(args, extra)
        fresh0, _ = s.ask(prompt)
        s.stop()
        files = [f for f in os.listdir(d) if f.endswith(".tqpc")]
        size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
        warm, cold, texts = [], [], set()
        loads = 0
        for _ in range(args.reps):
            s = Server(args, extra)
            t, text = s.ask(prompt + question)
            loads += s.metrics().get("tq_cache_dir_loads_total", 0)
            s.stop()
            warm.append(t)
            texts.add(("dir", text))
            s = Server(args, ["--prefix-cache", "0"])
            t, text = s.ask(prompt + question)
            s.stop()
            cold.append(t)
            texts.add(("fresh", text))
        same = len({t for _, t in texts}) == 1
        print("model %s, kv %s, -t %d, prompt about %d tokens (+ 9 more tokens)" %
              (args.model, args.kv, args.threads, args.prompt_tokens))
        print("first ask (fresh prefill, kept, written at exit): TTFT %.2f s; %d file(s), %.1f MB" %
              (fresh0, len(files), size / 1e6))
        print("after a restart, from --cache-dir: TTFT median %.2f s (loads %d of %d)" %
              (median(warm), loads, args.reps))
        print("without --cache-dir (fresh prefill):  TTFT median %.2f s" % median(cold))
        print("ratio %.1fx; greedy answers %s" % (median(cold) / median(warm), "equal" if same else "DIFFER"))
        return 0 if same and loads == args.reps else 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
