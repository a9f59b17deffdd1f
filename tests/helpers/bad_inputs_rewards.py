"""Bad reward input, as a table in the format of ``test_bad_inputs.CASES``: ``(argv, expected substring)``.

``argv`` goes to ``flowrl.cli.main`` with ``{tmp}`` replaced by a temporary folder that is also the working
directory and holds ``FILES``; it must return 2 and print one stderr line ``flowrl: error: ...`` holding the
substring. ``tests/`` must be importable (``fault_rewards``). ``serve-reward`` cases use ``--port 0``: each
fails before anything is bound. ``TRAIN_CASES`` go through ``flowrl train`` / ``validate`` and need those
commands to call ``flowrl.reward_models.check_reward_args`` before building a model.
"""

FILES = {
    "broken_rewards.py": "def redness(images, prompts, metadata)\n    return images.mean()\n",  # no colon
    "raising_rewards.py": "import torch\nSCALE = torchh.tensor(1.0)\n",  # NameError on import
}

RT = ["rewards", "test"]
URL = "url=http://127.0.0.1:9"


def _serve(*args: str) -> list[str]:
    return ["serve-reward", *args, "--port", "0"]


CASES = [
    # constructor arguments the reward does not take, with the closest one
    (
        RT + ["ocr", "backnd=tesseract"],
        "ocr takes no argument 'backnd'; it takes backend, target_key, backend_kwargs; did you mean 'backend'?",
    ),
    (RT + ["jpeg_compressibility", "qualty=80"], "jpeg_compressibility takes no argument 'qualty'; it takes quality"),
    (_serve("ocr", "backnd=tesseract"), "ocr takes no argument 'backnd'"),
    (_serve("jpeg_compressibility", "qualty=80"), "did you mean 'quality'?"),
    (RT + ["video", "reward=jpeg_compressibility", "frams=4"], "video takes no argument 'frams'"),
    (RT + ["fault_rewards:brightness", "scale=2"], "fault_rewards:brightness takes no argument 'scale'; it takes no"),
    (RT + ["fault_rewards:FailAt", "hw=hang"], "fault_rewards:FailAt takes no argument 'hw'"),
    # the remote reward: its keys, a missing url, settings that could wait forever
    (RT + ["remote"], "remote needs argument 'url': give url=..."),
    (_serve("remote"), "remote needs argument 'url'"),
    (RT + ["remote", URL, "tmeout=3"], "remote takes no argument 'tmeout'"),
    (_serve("remote", URL, "tokn=x"), "did you mean 'token'?"),
    (RT + ["remote", "url=127.0.0.1:9"], "remote reward: url must start with http:// or https://"),
    (RT + ["remote", URL, "timeout=0"], "remote reward: timeout must be a positive, finite number of seconds"),
    (_serve("remote", URL, "timeout=.inf"), "remote reward: timeout must be a positive, finite number"),
    (RT + ["remote", URL, "retries=-1"], "remote reward: retries must be a whole number >= 0"),
    (RT + ["remote", URL, "batch_size=0"], "remote reward: batch_size must be at least 1"),
    # reward modules and names
    (RT + ["no_such_module:fn"], "reward 'no_such_module:fn': cannot import module 'no_such_module'"),
    (_serve("no_such_module:fn"), "cannot import module 'no_such_module'"),
    (RT + ["flowrl.reward_models.jpeg:Nope"], "module 'flowrl.reward_models.jpeg' has no attribute 'Nope'"),
    (RT + [":fn"], "reward ':fn': expected 'module:attr'"),
    (RT + ["broken_rewards:redness"], "importing module 'broken_rewards' raised SyntaxError"),
    (_serve("raising_rewards:redness"), "importing module 'raising_rewards' raised NameError: name 'torchh'"),
    (_serve("pickscor"), "unknown reward 'pickscor'; did you mean 'pickscore'?"),
    # values the constructor refuses, and malformed arguments
    (RT + ["ocr", "backend=tesseractt"], "ocr reward: unknown backend 'tesseractt'"),
    (RT + ["ocr", "backend"], "expected key=value"),
    (["serve-reward", "jpeg_compressibility", "--port", "70000"], "--port: must be in 0..65535"),
]

TRAIN = ["train", "train.iterations=1", "output_dir={tmp}/run"]
TRAIN_CASES = [
    (TRAIN + ["reward={remote: 1.0}"], "reward_args.remote.url: remote needs argument 'url'"),
    (
        TRAIN + ["reward={remote: 1.0}", "reward_args={remote: {url: 'http://127.0.0.1:9', tmeout: 3}}"],
        "reward_args.remote.tmeout: remote takes no argument 'tmeout'",
    ),
    (TRAIN + ["reward_args.jpeg_compressibility.qualty=80"], "did you mean 'quality'?"),
    (
        TRAIN + ["reward={'fault_rewards:brightness': 1.0}", "reward_args={'fault_rewards:brightness': {scale: 2}}"],
        "reward_args.fault_rewards:brightness.scale: fault_rewards:brightness takes no argument 'scale'",
    ),
    (
        TRAIN + ["reward={'fault_rewards:FailAt': 1.0}", "reward_args={'fault_rewards:FailAt': {hw: hang}}"],
        "did you mean 'how'?",
    ),
    (TRAIN + ["reward={'broken_rewards:redness': 1.0}"], "importing module 'broken_rewards' raised SyntaxError"),
    (["validate", "reward={remote: 1.0}"], "reward_args.remote.url: remote needs argument 'url'"),
]
