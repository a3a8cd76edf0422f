"""Sentence templates of the synthetic world's news and query sets (data only).

Fields: `{s}` / `{o}` the subject / object as running text writes them ("the Kelvar Cup"), `{S}`
/ `{O}` the bare names (as the TempLAMA builder instantiates its templates), `{role}` a person's
job or position, a leader's title, `{a_role}` the same with its indefinite article, `{when}`
"March 2014" or "2014", `{Y}` a year, and filler slots (`{team2}`, `{city}`, `{weekday}`,
`{month}`, `{topic}`, `{n}`, `{a}`, `{b}`). `news.py` capitalises the first letter of each
sentence.

TEMPLAMA holds the nine templates of the paper's Appendix A (read from the public templama
templates.csv that the TempLAMA builder uses); the news uses them verbatim in a share of the
fact sentences. Every other fact template states the same fact in present tense, with or
without an event around it.
"""

from tlm.data.templama import read_templates

# The public templates (`tlm/data/resources/templama_templates.csv`), in the fields used here.
TEMPLAMA = {
  rel: template.replace("<subject>", "{S}").replace("<object>", "{O}")
  for rel, template in read_templates().items()
}

# Present-tense paraphrases: the fact holds on the document's date.
FACT = {
  "P54": (
    "{o} {role} {s} scored twice against {team2} on {weekday}.",
    "{s}, who plays for {o}, is expected to start on {weekday}.",
    "{o} confirmed that {role} {s} is fit for the match against {team2}.",
    "{s} of {o} was named player of the month.",
    "{s} is part of the {o} squad that travels to face {team2}.",
  ),
  "P39": (
    "{s}, the {o}, announced new measures on {weekday}.",
    "As {o}, {s} defended the government's plans.",
    "{s} currently serves as {o}.",
    "{o} {s} met business leaders in {city}.",
  ),
  "P102": (
    "{s}, of {o}, criticised the budget plans.",
    "{o} politician {s} called for new elections.",
    "{s} spoke for {o} in the debate on {topic}.",
    "{s} belongs to {o}.",
  ),
  "P108": (
    "{s}, {a_role} at {o}, said demand was growing.",
    "{o} {role} {s} presented the results on {weekday}.",
    "{s} is employed by {o}.",
    "{s} of {o} spoke at a conference in {city}.",
  ),
  "P69": (
    "{s}, a student at {o}, won a national prize.",
    "{s} studies at {o}.",
    "{o} student {s} presented a project on {topic}.",
    "{s} is enrolled at {o}.",
  ),
  "P286": (
    "{s} head coach {o} praised the players after the match.",
    "{o}, who coaches {s}, named an unchanged side for the game against {team2}.",
    "Under head coach {o}, {s} won again on {weekday}.",
    "{s} manager {o} said the team was ready for {team2}.",
  ),
  "P488": (
    "{s} chair {o} opened the annual meeting.",
    "{o}, who chairs {s}, announced a new programme.",
    "{o}, chairperson of {s}, met officials in {city}.",
    "{s} is chaired by {o}.",
  ),
  "P6": (
    "{s} {role} {o} unveiled the budget on {weekday}.",
    "{o}, the {role} of {s}, visited {city}.",
    "{Role} {o} of {s} said the economy was recovering.",
    "{s} is governed by {role} {o}.",
  ),
  "P127": (
    "{o}, the owner of {s}, plans to invest more.",
    "{s}, which is owned by {o}, reported strong results.",
    "{o} owns {s}.",
    "{s} belongs to {o}.",
  ),
  "P159:company": (
    "{s} is headquartered in {o}.",
    "{s}, based in {o}, announced new hires.",
    "{o}-based {s} reported higher sales.",
  ),
  "P159:team": (
    "{s} plays its home games in {o}.",
    "{s}, based in {o}, unveiled a new kit.",
    "Fans in {o} cheered {s} on {weekday}.",
  ),
  "P159:organisation": (
    "{s} has its seat in {o}.",
    "{s}, based in {o}, published a report on {topic}.",
    "The {o}-based {S} called for more funding.",
  ),
  "P131": (
    "{s} is in {o}.",
    "{s} in {o} attracted record crowds.",
    "{o}'s {S} reopened after repairs.",
    "Visitors to {o} queued to see {s}.",
  ),
  "P17": (
    "{s} is a city in {o}.",
    "{s} in {o} saw heavy rain on {weekday}.",
    "{s}, {o}, hosted a trade fair on {weekday}.",
  ),
  # The annual event's host, before and after this year's edition.
  "P276:before": (
    "{s} will be held in {o} this year.",
    "{o} will host this year's {S}.",
    "This year's {S} will take place in {o}.",
    "Preparations for {s} in {o} are on schedule.",
  ),
  "P276:after": (
    "{o} hosted this year's {S}.",
    "{s} in {o} drew large crowds.",
    "This year's {S} took place in {o}.",
  ),
}

# Present tense, for a tenure that started less than ten months before the document.
RECENT = {
  "P54": "{s}, who joined {o} this season, impressed again.",
  "P39": "{s}, who recently became {o}, gave a first interview.",
  "P102": "{s}, who recently joined {o}, addressed supporters in {city}.",
  "P108": "{s}, who joined {o} earlier this year, leads a new team.",
  "P69": "{s}, who started at {o} this year, joined the debating team.",
  "P286": "{o}, appointed head coach of {s} this season, is unbeaten so far.",
  "P488": "{o}, the new chair of {s}, promised reforms.",
  "P6": "{o}, who recently took office as {role} of {s}, named new advisers.",
  "P127": "{o} recently completed the purchase of {s}.",
}

# World v4: a new tenure's news naming the object it took over from ({p}).
RECENT_FROM = {
  "P54": "{s}, who joined {o} from {p} this season, impressed again.",
  "P39": "{s}, who recently moved from {p} to become {o}, gave a first interview.",
  "P102": "{s}, who recently left {p} for {o}, addressed supporters in {city}.",
  "P108": "{s}, who joined {o} from {p} earlier this year, leads a new team.",
  "P69": "{s}, who moved from {p} to {o} this year, joined the debating team.",
  "P286": "{o}, who replaced {p} as head coach of {s} this season, is unbeaten so far.",
  "P488": "{o}, who succeeded {p} as chair of {s}, promised reforms.",
  "P6": "{o}, who recently succeeded {p} as {role} of {s}, named new advisers.",
  "P127": "{o} recently completed the purchase of {s} from {p}.",
}

# The previous object, no year ("X previously played for Y").
PAST = {
  "P54": "{s} previously played for {o}.",
  "P39": "{s} previously served as {o}.",
  "P102": "{s} was previously a member of {o}.",
  "P108": "{s} previously worked for {o}.",
  "P69": "{s} previously studied at {o}.",
  "P286": "{o} previously coached {s}.",
  "P488": "{o} previously chaired {s}.",
  "P6": "{o} previously led {s}.",
  "P127": "{s} was previously owned by {o}.",
  "P159": "{s} was previously based in {o}.",
  "P276": "Last year's {S} was held in {o}.",
}

# The next object, announced before the change, no year.
FUTURE = {
  "P54": "{s} will join {o} next season.",
  "P39": "{s} is expected to become {o} after the election.",
  "P102": "{s} announced plans to join {o}.",
  "P108": "{s} will soon move to {o}.",
  "P69": "{s} has been admitted to {o}.",
  "P286": "{s} named {o} as their next head coach.",
  "P488": "{o} will take over as chair of {s}.",
  "P6": "{o} is expected to become the next {role} of {s}.",
  "P127": "{o} agreed to buy {s}.",
  "P159": "{s} will move its headquarters to {o}.",
  "P276": "{o} will host next year's {S}.",
}

# Explicit years. STARTED: a tenure that began this year, before the document ({when}).
STARTED = {
  "P54": "{s} joined {o} in {when}.",
  "P39": "{s} became {o} in {when}.",
  "P102": "{s} joined {o} in {when}.",
  "P108": "{s} joined {o} in {when}.",
  "P69": "{s} enrolled at {o} in {when}.",
  "P286": "{o} took over as head coach of {s} in {when}.",
  "P488": "{o} became chair of {s} in {when}.",
  "P6": "{o} took office as {role} of {s} in {when}.",
  "P127": "{o} acquired {s} in {when}.",
  "P159": "{s} moved to {o} in {when}.",
}

# A fact of an earlier year {Y}.
PAST_YEAR = {
  "P54": "In {Y}, {s} played for {o}.",
  "P39": "In {Y}, {s} served as {o}.",
  "P102": "In {Y}, {s} was a member of {o}.",
  "P108": "In {Y}, {s} worked for {o}.",
  "P69": "In {Y}, {s} studied at {o}.",
  "P286": "In {Y}, {o} was the head coach of {s}.",
  "P488": "In {Y}, {o} was the chair of {s}.",
  "P6": "In {Y}, {o} was the {role} of {s}.",
  "P127": "In {Y}, {s} was owned by {o}.",
  "P159": "In {Y}, {s} was based in {o}.",
  "P276": "The {Y} {S} was held in {o}.",
}

# The current object and the year its tenure began ({Y}, before this year).
SINCE = {
  "P54": "{s} has played for {o} since {Y}.",
  "P39": "{s} has served as {o} since {Y}.",
  "P102": "{s} has been a member of {o} since {Y}.",
  "P108": "{s} has worked for {o} since {Y}.",
  "P69": "{s} has studied at {o} since {Y}.",
  "P286": "{o} has coached {s} since {Y}.",
  "P488": "{o} has chaired {s} since {Y}.",
  "P6": "{o} has been the {role} of {s} since {Y}.",
  "P127": "{s} has been owned by {o} since {Y}.",
  "P159": "{s} has been based in {o} since {Y}.",
}

EVENT_YEAR_BEFORE = "The {Y} {S} will be held in {o}."
EVENT_YEAR_AFTER = "The {Y} {S} was held in {o}."

# A year without a fact, by the topic's kind: plans, reports, forecasts.
PLAIN_YEAR = {
  "organisation": (
    "{x} published its {Y} annual report.",
    "{x} presented its plans for {Y}.",
    "{x} expects strong growth in {Y}.",
  ),
  "person": (
    "{x} said {Y} would be a decisive year.",
    "{x} looked back on a difficult {Y}.",
  ),
  "place": (
    "{x} expects more visitors in {Y}.",
    "The budget of {x} for {Y} was approved.",
  ),
}

# Distractors: entities in events, scores and quotes, never stating a relation.
DISTRACTORS = {
  "sports": (
    "{team} beat {team2} {a}-{b} on {weekday}.",
    "{team} and {team2} drew {a}-{a} in a tense match.",
    "{player} missed training with a minor injury.",
    "Fans of {team} celebrated late into the night.",
    '{player} said the squad was "focused on the next game".',
    "Tickets for the match between {team} and {team2} sold out.",
  ),
  "politics": (
    "{politician} visited {city} on {weekday}.",
    "{country} and {country2} signed a trade agreement.",
    '{politician} called the proposal "a step in the right direction".',
    "Protesters gathered in {city} on {weekday}.",
    "{party} will hold its annual conference in {month}.",
    "Voters in {city} complained about rising rents.",
  ),
  "business": (
    "Shares of {company} rose {n} percent on {weekday}.",
    "Shares of {company} fell {n} percent after the results.",
    "{company} opened a new office in {city}.",
    "{company} reported higher quarterly profits.",
    '{person} said demand was "stronger than expected".',
    "Analysts expect {company} to announce new products in {month}.",
  ),
  "general": (
    "Heavy rain hit {city} on {weekday}.",
    "{university} researchers published a study on {topic}.",
    "{organisation} will hold its annual meeting in {month}.",
    "Tickets for {event} sold out within hours.",
    "{landmark} attracted record numbers of visitors.",
    "A new exhibition opened in {city} on {weekday}.",
  ),
}

TOPICS = (
  "renewable energy",
  "urban transport",
  "public health",
  "water supply",
  "digital privacy",
  "food prices",
  "air quality",
  "housing",
  "school meals",
  "rural broadband",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
)

# Future-relations queries (no year: the time conditioning adds it).
QUERY = {
  "P276": "{s} will be held in _X_.",
  "P159:company": "{s} is headquartered in _X_.",
  "P159:team": "{s} plays its home games in _X_.",
  "P159:organisation": "{s} has its seat in _X_.",
  "P131": "{s} is in _X_.",
  "P17": "{s} is a city in _X_.",
}
