"""What a mined skill carries: ``observe.py`` is copied into each mined skill folder as its script (it
runs alone in the sandbox, standard library only), and the miner imports its state parsing from here so
cases are written the way the script reads them."""
