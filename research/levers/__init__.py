"""The lever study: what more steps, a wider model or a dated start change in the miniature
(README.md beside this file: the question, both pre-registrations, the results).
"""
