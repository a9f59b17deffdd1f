"""The toy audio-video benchmark: a tiny LTX-2 pretrained on flash-and-beep renders, judged by an exact detector."""
