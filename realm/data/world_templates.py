"""The wording of the embedded world: entity kinds and relations, article (Z), sentence (X) and question templates,
and the flavour pools of the articles. ``realm.data.world`` fills them with fictional names and facts.
"""

PERSON, CITY, ORG = "person", "city", "organisation"
RELATIONS = {
    PERSON: ("born", "birthplace", "employer"),
    CITY: ("country", "founded"),
    ORG: ("founded", "headquarters", "founder"),
}
# own tuple rather than calendar.month_name, which follows the locale
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
ORG_KINDS = (
    "Institute", "Shipping Company", "Bank", "Observatory", "Press", "Trading House", "Foundry", "Academy",
    "Railway Company", "Conservatory", "Insurance Company", "Gazette", "Brewery", "Mining Company", "Museum",
)  # fmt: skip

# Z: encyclopaedic wording. {name} is the full name, {short} the surname of a person (the name otherwise), {v} the
# fact value; the other fields are per-entity flavour that is not a fact and never appears in X.
Z_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    PERSON: {
        "born": ("{name} was born on {v} into a family of {background}.",
                 "{name} (born {v}) was a {occ} whose work is still cited by specialists.",
                 "Born on {v}, {name} began training as a {occ} at the age of fifteen."),
        "birthplace": ("{short} was born in {v} and spent a quiet childhood there.",
                       "{short} is a native of {v}, where the family had lived for generations."),
        "employer": ("{short} worked for the {v} for most of a long career.",
                     "{short} later joined the {v} and remained there for many years.",
                     "For several decades {short} was employed by the {v}."),
        "flavour": ("{short} was a {adj} {occ} who kept detailed notebooks of every project.",
                    "{name} is remembered by historians as a {adj} {occ}.",
                    "{short} wrote a short memoir that describes the daily life of a {occ}.",
                    "{short} trained many apprentices, who later spread these methods across the region."),
    },
    CITY: {
        "country": ("{name} is a {desc} in {v}.",
                    "{name} is located in the {direction} of {v}.",
                    "Lying in the {direction} of {v}, {name} is a {desc}."),
        "founded": ("{name} was founded in {v} around a {landmark}.",
                    "The town of {name} received its charter in {v}.",
                    "{name} was established in {v} on the site of an older village."),
        "flavour": ("{name} is known for its {product} and its busy weekly market.",
                    "The old quarter of {name} is built around a {feature}.",
                    "Most people in {name} earn a living from {industry}.",
                    "{name} holds a large fair every autumn that draws visitors from the surrounding villages."),
    },
    ORG: {
        "founded": ("The {name} was founded in {v}.",
                    "The {name} was established in {v} and grew steadily over the following decades."),
        "headquarters": ("The {name} is headquartered in {v}.",
                         "The headquarters of the {name} are located in {v}."),
        "founder": ("The {name} was founded by {v}.",
                    "{v} founded the {name} with money borrowed from relatives."),
        "flavour": ("The {name} is a {orgdesc}.",
                    "The {name} is known for its {asset}.",
                    "Over the years the {name} has employed several hundred people.",
                    "The {name} publishes a detailed annual report on its activities."),
    },
}  # fmt: skip

# X: other wordings, one fact per sentence; only {name} (always the full name) and {v}.
X_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    PERSON: {
        "born": ("{name} came into the world on {v}.", "The birth of {name} took place on {v}.",
                 "{name}'s date of birth is {v}.", "Records give {v} as the birthday of {name}."),
        "birthplace": ("{name} is originally from {v}.", "The hometown of {name} is {v}.",
                       "{v} is the place where {name} first saw daylight.", "{name} hails from {v}."),
        "employer": ("{name} held a position at the {v}.", "{name} was on the staff of the {v}.",
                     "The {v} once employed {name}.", "{name} earned a living working for the {v}."),
    },
    CITY: {
        "country": ("{name} lies within the borders of {v}.", "{name} is part of {v}.",
                    "{v} is the country that contains {name}.", "The nation of {v} includes the town of {name}."),
        "founded": ("{name} dates back to {v}.", "The first settlers arrived at {name} in {v}.",
                    "{v} marks the founding year of {name}.", "{name} has existed as a settlement since {v}."),
    },
    ORG: {
        "founded": ("The {name} opened its doors in {v}.", "The {name} has been operating since {v}.",
                    "{v} saw the creation of the {name}.", "The {name} began its work in {v}."),
        "headquarters": ("The {name} has its main offices in {v}.", "The {name} is run from {v}.",
                         "{v} is home to the head office of the {name}.", "The {name} operates out of {v}."),
        "founder": ("The {name} was started by {v}.", "{v} set up the {name}.",
                    "The {name} owes its existence to {v}.", "{v} is credited with creating the {name}."),
    },
}  # fmt: skip

QUESTION_TEMPLATES: dict[str, dict[str, str]] = {
    PERSON: {"born": "When was {name} born?", "birthplace": "Where was {name} born?",
             "employer": "Which organisation employed {name}?"},
    CITY: {"country": "In which country is {name}?", "founded": "In what year was {name} founded?"},
    ORG: {"founded": "In what year was the {name} founded?", "headquarters": "Where is the {name} headquartered?",
          "founder": "Who founded the {name}?"},
}  # fmt: skip

FLAVOUR: dict[str, dict[str, tuple[str, ...]]] = {
    PERSON: {
        "occ": ("cartographer", "botanist", "engineer", "merchant", "composer", "physician", "architect", "printer",
                "shipwright", "astronomer", "lawyer", "painter", "surveyor", "chemist", "translator", "historian"),
        "adj": ("careful", "patient", "gifted", "restless", "meticulous", "inventive", "quiet", "ambitious"),
        "background": ("farmers", "clerks", "weavers", "boatmen", "teachers", "small traders", "millers"),
    },
    CITY: {
        "desc": ("river port", "market town", "hill town", "mining town", "coastal city", "garrison town",
                 "university town", "fishing town"),
        "direction": ("north", "south", "east", "west", "interior", "far north", "southwest"),
        "feature": ("stone bridge", "covered market", "clock tower", "walled harbour", "ruined abbey", "salt spring"),
        "landmark": ("ford", "crossroads", "fortified mill", "monastery", "natural harbour", "toll gate"),
        "product": ("woollen cloth", "glassware", "salted fish", "clockwork", "river pearls", "dark beer"),
        "industry": ("farming", "weaving", "shipbuilding", "the salt trade", "quarrying", "printing", "tanning"),
    },
    ORG: {
        "orgdesc": ("small but influential institution", "private enterprise with a loyal clientele",
                    "cooperative owned by its members", "family business that never went public"),
        "asset": ("careful record keeping", "large archive", "strict rules for its members", "modest budget",
                  "handsome main building"),
    },
}  # fmt: skip
