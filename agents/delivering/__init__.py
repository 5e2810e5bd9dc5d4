"""Delivering: the executor performs the decided effects – posts and cards, forms and their
answers, step dispatch, plan notices and endings – and starts the runs they ask for.

The top stage: imports every stage below it.
"""
