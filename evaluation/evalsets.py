"""tab:data's evaluation sets: each one's domain, samples drawn per problem and problem
count, and its title in tables. dataprep/data.py writes the sets, eval.py reads them, evaluation/report.py and
evaluation/tables.py lay them out; this file holds their names only, so that laying out a table does
not load the dataset converters.
"""

# tab:data: the evaluation sets, their domain, samples drawn per problem (n) and problem count.
EVAL_SETS = {
    "deepscaler_test": {"domain": "math", "n": 4, "problems": 500},
    "math500": {"domain": "math", "n": 4, "problems": 500},
    "aime24": {"domain": "math", "n": 8, "problems": 30},
    "aime25": {"domain": "math", "n": 8, "problems": 30},
    "aime26": {"domain": "math", "n": 8, "problems": 30},
    "amc23": {"domain": "math", "n": 8, "problems": 46},
    "amc24": {"domain": "math", "n": 8, "problems": 45},
    "deepcoder_test": {"domain": "code", "n": 4, "problems": 500},
    "humanevalplus": {"domain": "code", "n": 4, "problems": 163},
    "lcb_v5": {"domain": "code", "n": 4, "problems": 279},
    "lcb_v6": {"domain": "code", "n": 4, "problems": 131},
}
SET_TITLES = {
    "deepscaler_test": "DeepScaleR",
    "math500": "MATH-500",
    "aime24": "AIME-24",
    "aime25": "AIME-25",
    "aime26": "AIME-26",
    "amc23": "AMC-23",
    "amc24": "AMC-24",
    "deepcoder_test": "DeepCoder",
    "humanevalplus": "HumanEval+",
    "lcb_v5": "LCB v5",
    "lcb_v6": "LCB v6",
}
