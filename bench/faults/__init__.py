"""The fault drill's battery (``bench/fault_drill.py``): each drill breaks one thing for real and
says what Trawl did about it."""
