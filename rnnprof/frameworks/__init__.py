"""The one quiet import of each framework (``tensorflow``, ``torch``), naming the extra that installs it when it
is missing."""
