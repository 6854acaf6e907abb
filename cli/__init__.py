"""The ``trawl`` command line: one module per command group, registered in :mod:`cli.main`.

It sits on top of every other package (it may import all of them) and is the only
package that prints. Commands parse arguments, call one function of the package that
does the work, and show the result.
"""
