"""The sentence templates of the sandbox's pages: one or more wordings per relation, pairs of
facts written together, sentences about the entities that point at a page, filler without facts,
and the wording of news items and travel notes. ``{s}`` is the subject, ``{v}`` a value.
"""

# Sentence templates. {s}: the subject, {v}: the value (an entity reference or a literal with
# its unit), {y}: a year, {k}: the subject's kind ("bridge").
SINGLE: dict[str, tuple[str, ...]] = {
    "located_in": ("{s} is located in {v}.", "{s} lies in {v}.", "{s} can be found in {v}."),
    "capital": ("Its capital is {v}.", "The capital of {s} is {v}.",
                "{v} serves as the capital of {s}."),
    "twinned_with": ("{s} is twinned with {v}.", "{s} has a twinning arrangement with {v}."),
    "source": ("{s} rises on the slopes of {v}.", "The source of {s} lies on {v}."),
    "flows_into": ("{s} empties into {v}.", "{s} flows into {v}."),
    "first_ascended_by": ("{s} was first climbed by {v}.",
                          "The first recorded ascent of {s} was made by {v}."),
    "born_in": ("{s} was born in {v}.",),
    "died_in": ("{s} died in {v}.", "{s} spent the last years of life in {v} and died there."),
    "educated_at": ("{s} studied at {v}.", "{s} was educated at {v}."),
    "member_of": ("{s} was a member of {v}.", "{s} belonged to {v}.", "{s} joined {v}."),
    "founded_by": ("{s} was founded by {v}.", "{v} established {s}."),
    "headquartered_in": ("{s} is based in {v}.", "{s} has its headquarters in {v}."),
    "designed_by": ("{s} was designed by {v}.", "The design of {s} is by {v}.",
                    "{v} drew up the plans for {s}."),
    "named_after": ("{s} is named after {v}.", "{s} takes its name from {v}.",
                    "{s} was named in honour of {v}."),
    "commissioned_by": ("{s} was commissioned by {v}.", "{v} commissioned {s}."),
    "crosses": ("{s} spans {v}.", "{s} crosses {v}."),
    "created_by": ("{s} is a work by {v}.", "{s} was made by {v}.", "{v} is the author of {s}."),
    "depicts": ("{s} depicts {v}.", "{s} shows {v}.", "The subject of {s} is {v}."),
    "kept_in": ("{s} is kept in {v}.", "{s} is in the collection of {v}.",
                "Today {s} belongs to {v}."),
    "held_in": ("{s} took place in {v}.", "{s} was held in {v}."),
    "organised_by": ("{s} was organised by {v}.", "{v} organised {s}."),
    "led_by": ("{s} was led by {v}.", "{v} led {s}."),
    "native_to": ("{s} is native to {v}.", "{s} is endemic to {v}.", "{s} is found only in {v}."),
    "described_by": ("{s} was first described by {v}.",
                     "{v} gave the first scientific description of {s}."),
    "built_by": ("{s} was built by {v}.", "{v} built {s}."),
    "home_port": ("The home port of {s} is {v}.", "{s} sails from {v}.",
                  "{s} is registered at {v}."),
    "year_established": ("{s} was established in {y}.", "{s} has existed as a {k} since {y}."),
    "year_founded": ("{s} was founded in {y}.", "The first records of {s} date from {y}.",
                     "{s} dates from {y}."),
    "year_built": ("{s} was built in {y}.", "Construction of {s} was completed in {y}.",
                   "{s} was finished in {y}."),
    "year_created": ("{s} dates from {y}.", "{s} was made in {y}.", "{s} was completed in {y}."),
    "year_held": ("{s} took place in {y}.", "{s} happened in {y}."),
    "year_described": ("{s} was described in {y}.", "The species was formally described in {y}."),
    "year_launched": ("{s} was launched in {y}.", "{s} entered service in {y}."),
    "first_ascent_year": ("{s} was first climbed in {y}.",
                          "The summit of {s} was first reached in {y}."),
    "year_born": ("{s} was born in {y}.",),
    "year_died": ("{s} died in {y}.",),
    "population": ("{s} has a population of {v}.", "About {v} people live in {s}.",
                   "The population of {s} is {v}."),
    "area": ("{s} covers {v}.", "{s} has an area of {v}.", "The area of {s} is {v}."),
    "elevation": ("{s} lies at an elevation of {v}.", "{s} stands {v} above sea level."),
    "length": ("{s} is {v} long.", "{s} has a length of {v}.", "{s} measures {v} in length."),
    "height": ("{s} is {v} tall.", "{s} rises to a height of {v}."),
    "depth": ("{s} is up to {v} deep.", "{s} reaches a maximum depth of {v}."),
    "material": ("{s} is executed in {v}.", "The material of {s} is {v}."),
    "participants": ("About {v} people took part in {s}.", "{s} drew around {v} participants."),
    "members": ("{s} has about {v} members.", "{s} counts some {v} members."),
    "tonnage": ("{s} has a gross tonnage of {v}.", "The gross tonnage of {s} is {v}."),
    "occupation": ("{s} worked as {av}.",),
}
# Type-specific wording where the generic one reads badly.
SINGLE_BY_TYPE: dict[tuple[str, str], tuple[str, ...]] = {
    ("mountain", "elevation"): ("{s} reaches {v}.", "The summit of {s} stands at {v}.",
                                "{s} rises to {v}."),
    ("lake", "elevation"): ("{s} lies {v} above sea level.",),
    ("species", "length"): ("{s} grows to about {v}.", "Adults of {s} measure up to {v}."),
    ("building", "located_in"): ("{s} stands in {v}.", "{s} is located in {v}.",
                                 "{s} is a landmark of {v}."),
}
# Templates that write two facts in one sentence.
PAIRS: dict[tuple[str, str], tuple[str, ...]] = {
    ("designed_by", "year_built"): ("{s} was designed by {v} and completed in {y}.",
                                    "{v} designed {s}, which was finished in {y}.",
                                    "Built in {y}, {s} is the work of {v}."),
    ("created_by", "year_created"): ("{s} was made by {v} in {y}.",
                                     "{v} completed {s} in {y}.",
                                     "{s} is a work by {v}, dated {y}."),
    ("founded_by", "year_founded"): ("{s} was founded by {v} in {y}.",
                                     "{v} established {s} in {y}.", "In {y}, {v} founded {s}."),
    ("described_by", "year_described"): ("{s} was first described by {v} in {y}.",
                                         "{v} described {s} in {y}."),
    ("built_by", "year_launched"): ("{s} was built by {v} and launched in {y}.",
                                    "{v} built {s}, launched in {y}."),
    ("held_in", "year_held"): ("{s} took place in {v} in {y}.", "In {y}, {s} was held in {v}."),
    ("first_ascended_by", "first_ascent_year"): (
        "{s} was first climbed by {v} in {y}.", "The first ascent of {s} was made by {v} in {y}."),
}
# Relations that may have several values: written as one sentence with a list.
MULTI: dict[str, tuple[str, ...]] = {
    "borders": ("{s} borders {v}.", "{s} shares borders with {v}."),
    "flows_through": ("{s} flows through {v}.", "On its course {s} passes {v}.",
                      "{s} runs past {v}."),
}
# Sentences about the entities that point at this one. {s}: this entity, {v}: the list.
INBOUND: dict[str, tuple[str, ...]] = {
    "located_in": ("{P} in {s} include {v}.", "Among the {p} of {s} are {v}."),
    "capital": ("{s} is the capital of {v}.",),
    "flows_through": ("{v} {flow} through {s}.",),
    "source": ("{v} {rise} on {s}.",),
    "flows_into": ("{v} {flow} into {s}.",),
    "first_ascended_by": ("{s} made the first ascent of {v}.",),
    "born_in": ("People born in {s} include {v}.", "{s} is the birthplace of {v}."),
    "died_in": ("{v} died in {s}.",),
    "educated_at": ("Alumni of {s} include {v}.", "{v} studied at {s}."),
    "member_of": ("Members of {s} have included {v}.",),
    "founded_by": ("{s} founded {v}.",),
    "headquartered_in": ("{v} {be} based in {s}.",),
    "designed_by": ("Works designed by {s} include {v}.", "{s} designed {v}."),
    "named_after": ("{v} {be} named after {s}.",),
    "commissioned_by": ("{s} commissioned {v}.",),
    "crosses": ("{s} is crossed by {v}.",),
    "created_by": ("Works by {s} include {v}.", "{s} made {v}."),
    "depicts": ("{s} is depicted in {v}.", "{s} appears in {v}."),
    "kept_in": ("The collection of {s} includes {v}.",),
    "held_in": ("Events held in {s} include {v}.",),
    "organised_by": ("{s} organised {v}.",),
    "led_by": ("{s} led {v}.",),
    "native_to": ("Species native to {s} include {v}.",),
    "described_by": ("{s} described {v}.",),
    "built_by": ("Ships built by {s} include {v}.",),
    "home_port": ("{v} {be} based at {s}.",),
}
# Where the list wording reads badly with a single item.
INBOUND_ONE: dict[str, tuple[str, ...]] = {
    "located_in": ("{v} is in {s}.", "{v} lies in {s}."),
    "member_of": ("{v} was a member of {s}.",),
}
WORKS_WITH_YEARS = {"designed_by": "year_built", "created_by": "year_created",
                    "described_by": "year_described"}

FILLER: dict[str, tuple[str, ...]] = {
    "any": (
        "Little has been written about {s} outside local sources.",
        "{s} appears in several regional guidebooks.",
        "Records from the early period are incomplete.",
        "A local history society keeps an archive of documents about {s}.",
    ),
    "region": ("Farming and forestry dominate the rural parts of {s}.",
               "Several rail lines cross {s}."),
    "settlement": ("A weekly market is still held in the main square.",
                   "The old centre keeps much of its street plan.",
                   "Small trades and farming shaped the local economy."),
    "river": ("Anglers visit its upper reaches in summer.",
              "Its banks were drained for farmland long ago."),
    "mountain": ("Pine forest covers its lower slopes.",
                 "Several marked trails lead towards the summit."),
    "lake": ("The lake freezes in most winters.", "Its shores are popular with walkers."),
    "person": ("Letters written by {s} survive in private collections.",
               "{s} received little attention from critics at the time."),
    "organisation": ("Its archives are open to researchers by appointment.",
                     "{s} publishes an annual report."),
    "building": ("The interior was restored in the late twentieth century.",
                 "Guided tours are offered on weekends."),
    "artwork": ("The work has been restored twice.", "Critics have praised its handling of light."),
    "event": ("Contemporary newspapers covered it widely.",
              "Accounts of what happened differ in detail."),
    "species": ("Little is known about its breeding habits.",
                "It is rarely seen outside its range."),
    "vessel": ("The ship was refitted several times.",
               "Models of the ship are displayed in local museums."),
}

# One fact as a clause after a noun: "Orsk Bridge, a bridge built in 1874, ...".
CLAUSES: dict[str, str] = {
    "located_in": "in {v}", "capital": "whose capital is {v}", "borders": "bordering {v}",
    "twinned_with": "twinned with {v}", "flows_through": "flowing through {v}",
    "source": "rising on {v}", "flows_into": "flowing into {v}",
    "first_ascended_by": "first climbed by {v}", "born_in": "born in {v}",
    "died_in": "who died in {v}", "educated_at": "educated at {v}",
    "member_of": "who belonged to {v}", "founded_by": "founded by {v}",
    "headquartered_in": "based in {v}", "designed_by": "designed by {v}",
    "named_after": "named after {v}", "commissioned_by": "commissioned by {v}",
    "crosses": "spanning {v}", "created_by": "by {v}", "depicts": "depicting {v}",
    "kept_in": "kept in {v}", "held_in": "held in {v}", "organised_by": "organised by {v}",
    "led_by": "led by {v}", "native_to": "native to {v}", "described_by": "described by {v}",
    "built_by": "built by {v}", "home_port": "based at {v}",
    "year_established": "established in {v}", "year_founded": "founded in {v}",
    "year_built": "built in {v}", "year_born": "born in {v}", "year_died": "who died in {v}",
    "year_created": "dated {v}", "year_held": "held in {v}", "year_described": "described in {v}",
    "year_launched": "launched in {v}", "first_ascent_year": "first climbed in {v}",
    "population": "with a population of {v}", "area": "covering {v}",
    "elevation": "at an elevation of {v}", "length": "{v} long", "height": "{v} tall",
    "depth": "up to {v} deep", "material": "in {v}", "participants": "with about {v} participants",
    "members": "with about {v} members", "tonnage": "of {v} gross tonnage",
}

NEWS_HEADLINES: dict[str, tuple[str, ...]] = {
    "building": ("Restoration work begins on {n}", "{N} reopens after repairs",
                 "Visitors return to {n}"),
    "artwork": ("{N} goes on display again", "Museum lends {n} for a touring show",
                "Experts re-examine {n}"),
    "event": ("Historians revisit {n}", "New book retells {n}", "Anniversary of {n} marked"),
    "settlement": ("{N} votes on a new harbour plan", "Council of {n} approves budget",
                   "Flood defences for {n}"),
    "organisation": ("{N} appoints a new director", "{N} celebrates its anniversary",
                     "Archive of {n} digitised"),
    "person": ("Papers of {n} found in an attic", "Exhibition remembers {n}",
               "Biography of {n} published"),
    "mountain": ("Rock fall closes path on {n}", "Record number of climbers on {n}",
                 "Snow survey on {n}"),
    "river": ("{N} bursts its banks after heavy rain", "Clean-up planned for {n}",
              "Otters return to {n}"),
    "lake": ("Water quality study on {n}", "Ice festival on {n} cancelled",
             "Divers map the bed of {n}"),
    "species": ("{N} sighted again after decades", "Survey counts {n}",
                "Habitat of {n} under threat"),
    "vessel": ("{N} returns to port", "Volunteers restore {n}",
               "{N} to be preserved as a museum ship"),
    "region": ("{N} announces new rail link", "Census results published for {n}",
               "Storm warning for {n}"),
}
TRAVEL_TITLES = ("A weekend in {n}", "Travel notes: {n}", "Walking around {n}", "{N} on a budget",
                 "Two days in {n}")

# The first sentence of an article: {n} the entity, {a} its kind with "a"/"an", {v} where it is.
LEADS: dict[str, tuple[str, ...]] = {
    "artwork": ("{n} is {a} by {v}.", "{n} is {a} made by {v}."),
    "organisation": ("{n} is {a} based in {v}.", "{n} is {a} headquartered in {v}."),
    "event": ("{n} was {a} held in {v}.", "{n} was {a} in {v}."),
    "species": ("{n} is a species of {k} native to {v}.", "{n} is {a} species endemic to {v}."),
    "vessel": ("{n} is {a} whose home port is {v}.", "{n} is {a} registered at {v}."),
    "": ("{n} is {a} in {v}.", "{n} is {a} located in {v}."),
}
LEAD_PLACES = {"settlement": "located_in", "mountain": "located_in", "lake": "located_in",
               "building": "located_in", "organisation": "headquartered_in", "event": "held_in",
               "species": "native_to", "vessel": "home_port", "artwork": "created_by"}
# A person's first sentence: {o} the occupation with "a"/"an", {p} the birthplace.
LIVING = ("{n} (born {b}) is {o} from {p}.", "{n} is {o} born in {p} in {b}.")
DEAD = ("{n} ({b}–{d}) was {o} born in {p}.", "{n} was {o}, born in {p} in {b}, who died in {d}.")
ALIASES = ("It is also known as {a}.", "Older sources call it {a}.", "{S} is sometimes called {a}.")

NEWS_ENDINGS = ("Readers can send their photographs to the newsroom.",
                "The story will be followed up next week.", "Comments are open below.")
ARRIVALS = ("The train was late, as usual.", "The bus from the coast takes three hours.",
            "Parking near the centre is difficult.")
SIGHTS = ("Do not miss {x} which is worth a detour.",
          "We spent an afternoon at {x} and were not disappointed.",
          "Locals recommended {x} though we found it crowded.")
TIPS = ("Bring good shoes.", "Cafes close early on Sundays.", "Cash is still useful here.")
