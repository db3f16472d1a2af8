"""GRASP: the plan language, rules planners and prompt, plans compiled to SQL, Stage-2 fusion, the SKB builders."""
