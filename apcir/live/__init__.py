"""iKAT's interactive task: the simulation API (protocol, client), local simulated users, and apcir as the agent
that answers each utterance as it arrives (``apcir converse``)."""
