//! The expression language, tested against what AWF (expr-lang) gives.

use super::*;
use serde_json::json;

fn env() -> Value {
    json!({
        "inputs": {"mode": "full", "n": 5, "flag": true, "ratio": 0.5, "name": "Ada",
                   "empty": ""},
        "states": {
            "build": {"Output": "ok\n", "Stderr": "", "ExitCode": 0, "Status": "completed",
                      "Response": {"k": "v", "items": [1, 2, 3]}, "TokensUsed": 0},
            "test": {"Output": "WARN: flaky\nline 2\n", "Stderr": "oops", "ExitCode": 2,
                     "Status": "failed", "Response": null, "TokensUsed": 12}
        },
        "env": {"HOME": "/home/u", "CI": "true"},
        "workflow": {"ID": "id-1", "Name": "wf", "CurrentState": "build", "Duration": "1.2s"},
        "context": {"WorkingDir": "/w", "User": "u", "Hostname": "h"}
    })
}

fn with_loop() -> Value {
    let mut e = env();
    e["loop"] = json!({"Index": 2, "Index1": 3, "Item": "b", "Length": 4, "First": false,
                       "Last": false, "Parent": {"Index": 0, "Item": "x"}});
    e
}

fn ev(text: &str) -> Result<bool, ExprError> {
    Expr::parse(text)?.eval_bool(&env())
}

#[track_caller]
fn yes(text: &str) {
    assert_eq!(ev(text), Ok(true), "{text}");
}

#[track_caller]
fn no(text: &str) {
    assert_eq!(ev(text), Ok(false), "{text}");
}

#[track_caller]
fn fails(text: &str) -> String {
    match ev(text) {
        Err(e) => e.message,
        Ok(b) => panic!("{text} gave {b}, expected an error"),
    }
}

#[test]
fn precedence_follows_expr_lang() {
    yes("1 + 2 * 3 == 7");
    yes("(1 + 2) * 3 == 9");
    yes("not true or true");
    no("not (true or true)");
    yes("!false && true");
    no("true and false or false");
    yes("false and false or true");
    yes("2 ** 3 ** 2 == 512");
    yes("2 ^ 3 == 8");
    yes("-2 ** 2 == -4");
    yes("10 - 2 - 3 == 5");
    yes("1 < 2 < 3");
    no("3 > 2 > 2");
    yes("1 + 2 * 3 > 6 ? true : false");
    yes("(not false) == true");
    // `not` binds tighter than `==`: `(not 1) == 2` is a type error.
    assert!(fails("not 1 == 2").contains("invalid operation: not"));
}

#[test]
fn comparisons_across_kinds() {
    yes("1 == 1.0");
    yes("2.5 > 2");
    yes("inputs.n == 5");
    no("inputs.n == \"5\"");
    yes("inputs.n != \"5\"");
    no("inputs.flag == \"true\"");
    yes("inputs.flag == true");
    no("states.build.Output == 0");
    yes("\"abc\" < \"abd\"");
    yes("nil == nil");
    no("inputs.mode == nil");
    yes("[1, 2] == [1, 2]");
    no("[1] == [1.0]");
    yes("states.build.Response == {k: \"v\", items: [1, 2, 3]}");
    assert!(fails("states.build.Output < 5").contains("invalid operation: string < int"));
    // Between literals, expr's checker refuses before running.
    assert!(fails("1 == \"1\"").contains("mismatched types int and string"));
    assert!(fails("\"a\" < 1").contains("mismatched types string and int"));
    assert!(fails("false and \"a\" < 1").contains("mismatched types"));
}

#[test]
fn arithmetic() {
    yes("7 / 2 == 3.5");
    yes("7 % 3 == 1");
    yes("-7 % 3 == -1");
    yes("1 / 0 > 1000");
    yes("2 ** 100000 > 0");
    yes("inputs.ratio * 2 == 1");
    yes("9223372036854775807 + 1 < 0");
    assert!(fails("inputs.ratio % 2 == 0").contains("invalid operation: float64 % int"));
    assert!(fails("states.test.ExitCode % 0 == 0").contains("integer divide by zero"));
    assert!(fails("1 + \"a\" == 2").contains("mismatched types int and string"));
}

#[test]
fn string_operators() {
    yes("states.test.Output contains \"WARN\"");
    yes("states.test.Output startsWith 'WARN'");
    yes("states.build.Output endsWith \"\\n\"");
    yes("states.test.Output not contains \"ERROR\"");
    yes("inputs.name + \"!\" == 'Ada!'");
    yes("`a\\n` == \"a\\\\n\"");
    yes(r#"'it\'s' == "it's" and "say \"hi\"" == `say "hi"`"#);
    assert!(
        Expr::parse(r#""it\'s" == 'x'"#)
            .unwrap_err()
            .message
            .contains("invalid char escape")
    );
    yes("\"\\u00e9\\x41\\101\\t\" == \"éAA\t\"");
    no("inputs.nope contains \"x\"");
    no("\"x\" startsWith inputs.nope");
    assert!(
        fails("states.test.ExitCode contains \"2\"").contains("interface {} is int, not string")
    );
}

#[test]
fn string_functions() {
    yes("trim(states.build.Output) == \"ok\"");
    yes("trim('xxhixx', 'x') == 'hi'");
    yes("len(\"héllo\") == 5");
    yes("len(states.build.Response.items) == 3");
    yes("len(states.build.Response) == 2");
    yes("upper(inputs.name) == \"ADA\" and lower(inputs.name) == \"ada\"");
    yes("trimPrefix(\"prefix-x\", \"prefix-\") == \"x\"");
    yes("trimSuffix(\"x.yaml\", \".yaml\") == \"x\"");
    yes("trimPrefix(\" x\") == \"x\"");
    yes("split(\"a,b,c\", \",\")[1] == \"b\"");
    yes("split(\"a,b,c\", \",\", 2)[1] == \"b,c\"");
    yes("split(\"abc\", \"\") == [\"a\", \"b\", \"c\"]");
    yes("split(states.test.Output, \"\\n\")[-2] == \"line 2\"");
    yes("has_prefix(states.test.Output, \"WARN\")");
    yes("has_suffix(inputs.name, \"da\")");
    yes("hasPrefix(\"abc\", \"a\")");
    yes("int(\"42\") == 42 and int(3.9) == 3");
    yes("float(\"1.5\") == 1.5");
    yes("string(1.5) == \"1.5\" and string(1000000.0) == \"1e+06\"");
    yes("string(123456.0) == \"123456\" and string(0.0001) == \"0.0001\"");
    yes("string(0.00001) == \"1e-05\" and string(-2.5e-7) == \"-2.5e-07\"");
    yes("string([1, \"a\", nil, true]) == \"[1 a <nil> true]\"");
    yes("string(states.build.Response) == \"map[items:[1 2 3] k:v]\"");
    yes("abs(-3) == 3 and abs(-2.5) == 2.5");
    yes("replace(\"a-b-c\", \"-\", \"+\") == \"a+b+c\"");
    yes("join(split(\"a b\", \" \"), \",\") == \"a,b\"");
    yes("indexOf(\"héllo\", \"l\") == 3");
    yes("type(inputs.n) == \"int\"");
    assert!(fails("int(\"x\") == 1").contains("invalid operation: int(x)"));
    assert!(fails("upper(1) == \"1\"").contains("cannot use int as argument"));
    assert!(fails("len(1, 2) == 1").contains("invalid number of arguments"));
    assert!(fails("upper(inputs.nope) == \"\"").contains("interface {} is nil, not string"));
    assert!(fails("max(1, 2) == 2").contains("not supported"));
    assert!(fails("frobnicate(1)").contains("unknown function frobnicate"));
}

#[test]
fn contains_as_a_call_is_rewritten() {
    yes("contains(states.test.Output, \"WARN\")");
    yes("contains(states.test.Output, \"WARN\") and contains(inputs.name, 'A')");
    // Rewritten to `not a contains b`, which is `(not a) contains b`: AWF fails too.
    let m = fails("not contains(inputs.name, \"A\")");
    assert!(
        m.contains("read as `not inputs.name contains \"A\"`"),
        "{m}"
    );
    // The rewrite is blind; `contains` is an operator, never a function.
    let e = Expr::parse("contains(\"a,b\", \"b\")").unwrap_err();
    assert!(
        e.message.contains("read as `\"a contains b\", \"b\"`"),
        "{}",
        e.message
    );
    let e = Expr::parse("contains(inputs.name)").unwrap_err();
    assert!(
        e.message
            .contains("unexpected token `contains` at column 1"),
        "{}",
        e.message
    );
}

#[test]
fn matches_regex() {
    yes("states.test.Output matches \"^WARN\"");
    yes("states.test.Output matches \"(?m)^line \\\\d$\"");
    yes("inputs.name matches \"(?i)^ada$\"");
    no("inputs.nope matches \"x\"");
    yes("\"abc\" matches \"b\" + \"c\"");
    let e = Expr::parse("inputs.name matches \"(\"").unwrap_err();
    assert!(e.message.contains("error parsing regexp"), "{}", e.message);
    assert!(fails("\"abc\" matches inputs.name + \"(\"").contains("error parsing regexp"));
}

#[test]
fn in_operator() {
    yes("2 in [1, 2, 3]");
    yes("2.0 in [1, 2, 3]");
    yes("\"k\" in states.build.Response");
    no("\"zz\" in states.build.Response");
    yes("3 in states.build.Response.items");
    yes("inputs.mode in [\"full\", \"quick\"]");
    yes("inputs.mode not in [\"quick\"]");
    no("1 in inputs.nope");
    yes("\"build\" in states");
    // expr's optimizer: a literal list of strings is a set of strings.
    assert!(
        fails("inputs.flag in [\"true\", \"false\"]")
            .contains("value of type bool is not assignable to type string")
    );
    yes("inputs.nope in [\"\", \"x\"]");
    assert!(fails("1 in \"abc\"").contains("mismatched types"));
    assert!(fails("inputs.n in \"abc\"").contains("operator \"in\" not defined on string"));
}

#[test]
fn coalesce_optional_chaining_and_ternary() {
    yes("(inputs.nope ?? \"d\") == \"d\"");
    yes("(inputs.mode ?? \"d\") == \"full\"");
    yes("states.never?.ExitCode == nil");
    yes("(states.never?.Response.k ?? 1) == 1");
    yes("states.build?.Response?.k == \"v\"");
    yes("states.build.Response?.[\"k\"] == \"v\"");
    yes("(inputs.n > 3 ? \"big\" : \"small\") == \"big\"");
    yes("(inputs.n > 9 ? \"big\" : inputs.n > 4 ? \"mid\" : \"small\") == \"mid\"");
    yes("inputs.flag ?: false");
    assert!(fails("inputs.n ? true : false").contains("interface {} is int, not bool"));
    assert!(fails("inputs.flag ? 1 : 2").contains("did not return a boolean, got int"));
    let e = Expr::parse("inputs.a ?? inputs.b == 1").unwrap_err();
    assert!(e.message.contains("cannot be mixed"), "{}", e.message);
}

#[test]
fn member_paths_on_the_env() {
    yes("states.build.ExitCode == 0 and inputs.mode == \"full\"");
    yes("states[\"build\"][\"ExitCode\"] == 0");
    yes("states.build.Response.items[0] == 1 and states.build.Response.items[-1] == 3");
    yes("workflow.Name == \"wf\" and workflow.Duration == \"1.2s\"");
    yes("context.User == \"u\" and env.CI == \"true\"");
    yes("$env.inputs.n == 5");
    yes("states.build.Response.items[1:] == [2, 3]");
    yes("\"hello\"[1:3] == \"el\"");
    no("states.build.output == \"ok\\n\"");
    let e = Expr::parse("loop.Index == 2 and loop.Parent.Item == \"x\" and loop.First == false")
        .unwrap();
    assert!(e.eval_bool(&with_loop()).unwrap());
    assert!(fails("states.build.Response.items[5] == 1").contains("index out of range"));
}

#[test]
fn nil_safety_follows_awf() {
    no("states.never.ExitCode == 0");
    no("states.never.ExitCode != 0");
    no("inputs.nope == \"x\"");
    yes("inputs.nope != \"x\"");
    no("inputs.nope > 5");
    no("inputs.nope + 1 > 2");
    no("env.NOPE > 5");
    let m = fails("5 < inputs.nope");
    assert!(m.contains("invalid operation: int < <nil>"), "{m}");
    let m = fails("loop.Index == 0");
    assert!(m.contains("cannot fetch Index from <nil>"), "{m}");
    assert!(fails("error.Message == \"\"").contains("cannot fetch Message"));
    // Any `cannot fetch` in an expression that mentions `states.` is false.
    no("loop.Index == 0 or states.build.ExitCode == 0");
    // A name on a string is an index that is no number: another message, an error.
    assert!(fails("states.build.Output.x == 1").contains("invalid operation: int(string)"));
    no("states.build.ExitCode.x == 1");
    // Not a nil on the left: an error.
    assert!(fails("-inputs.nope > 5").contains("invalid operation: - <nil>"));
    // A nil result is false (AsBool), another kind an error.
    no("inputs.nope");
    let m = fails("states.build.Output");
    assert!(m.contains("did not return a boolean, got string"), "{m}");
    assert!(fails("1 + 2").contains("did not return a boolean, got int"));
    // The filter reads the line where the error happened.
    let e = Expr::parse("states.build.ExitCode == 0 and\nloop.Index == 0").unwrap();
    assert!(e.eval_bool(&env()).is_err());
    let e = Expr::parse("inputs.mode == \"x\" or\nstates.never.ExitCode == 0").unwrap();
    assert_eq!(e.eval_bool(&env()), Ok(false));
}

#[test]
fn empty_expression_is_an_error() {
    assert_eq!(Expr::parse("").unwrap_err().message, "empty expression");
    assert_eq!(Expr::parse("  \n").unwrap_err().message, "empty expression");
}

#[test]
fn coerce_input_follows_awf() {
    assert_eq!(coerce_input("true"), json!(true));
    assert_eq!(coerce_input("True"), json!(true));
    assert_eq!(coerce_input("FALSE"), json!(false));
    assert_eq!(coerce_input("tRUE"), json!("tRUE"));
    assert_eq!(coerce_input("42"), json!(42));
    assert_eq!(coerce_input("-7"), json!(-7));
    assert_eq!(coerce_input("+7"), json!(7));
    assert_eq!(coerce_input("1.5"), json!(1.5));
    assert_eq!(coerce_input("1e3"), json!(1000.0));
    assert_eq!(coerce_input(".5"), json!(0.5));
    assert_eq!(coerce_input("99999999999999999999"), json!(1e20));
    assert_eq!(coerce_input("1e400"), json!("1e400"));
    assert_eq!(coerce_input("1_000"), json!("1_000"));
    assert_eq!(coerce_input("inf"), json!("inf"));
    assert_eq!(coerce_input(""), json!(""));
    assert_eq!(coerce_input(" 1"), json!(" 1"));
    assert_eq!(coerce_input("yes"), json!("yes"));
}

#[test]
fn limits_are_enforced() {
    let long = format!("true{}", " ".repeat(MAX_EXPR_BYTES - 4));
    assert!(Expr::parse(&long).is_ok());
    let longer = format!("{long} ");
    let e = Expr::parse(&longer).unwrap_err();
    assert!(
        e.message.contains("over the limit of 4096 bytes"),
        "{}",
        e.message
    );

    let nest = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
    assert!(Expr::parse(&nest(MAX_DEPTH)).is_ok());
    let e = Expr::parse(&nest(MAX_DEPTH + 1)).unwrap_err();
    assert!(
        e.message.contains("nests deeper than 64 levels"),
        "{}",
        e.message
    );
    let e = Expr::parse(&format!("{}true", "!".repeat(MAX_DEPTH + 1))).unwrap_err();
    assert!(e.message.contains("nests deeper than 64"), "{}", e.message);
    let ors = vec!["false"; MAX_DEPTH + 2].join(" or ");
    assert!(
        Expr::parse(&ors)
            .unwrap_err()
            .message
            .contains("nests deeper")
    );
    let ors = vec!["false"; MAX_DEPTH + 1].join(" or ");
    assert_eq!(Expr::parse(&ors).unwrap().eval_bool(&env()), Ok(false));
    // `a ?: b` holds `a` twice: nesting it doubles the tree.
    let mut doubling = "inputs.flag".to_string();
    for _ in 0..20 {
        doubling = format!("({doubling} ?: true)");
    }
    let e = Expr::parse(&doubling).unwrap_err();
    assert!(e.message.contains("more than 10000 nodes"), "{}", e.message);

    let mut big = env();
    big["inputs"]["s"] = json!("x".repeat(600 * 1024));
    let e = Expr::parse("len(inputs.s + inputs.s) > 0").unwrap();
    let m = e.eval_bool(&big).unwrap_err().message;
    assert!(m.contains("over the limit"), "{m}");
    let e = Expr::parse("len(inputs.s + \"x\") > 0").unwrap();
    assert_eq!(e.eval_bool(&big), Ok(true));
    let e = Expr::parse("len(replace(inputs.s, \"x\", \"xx\")) > 0").unwrap();
    assert!(
        e.eval_bool(&big)
            .unwrap_err()
            .message
            .contains("over the limit")
    );
    // Many strings each under the limit: the evaluation's budget.
    let parts = vec!["inputs.s + \"y\""; 30].join(", ");
    let e = Expr::parse(&format!("len([{parts}]) > 0")).unwrap();
    let m = e.eval_bool(&big).unwrap_err().message;
    assert!(m.contains("builds more than"), "{m}");
}

#[test]
fn syntax_errors_name_their_position() {
    let e = Expr::parse("states.x ==").unwrap_err();
    assert_eq!(
        e.message,
        "expression `states.x ==`: expected a value after `==` at column 10"
    );
    assert_eq!(e.offset, Some(9));
    let e = Expr::parse("inputs.a == \"x").unwrap_err();
    assert!(
        e.message.contains("literal not terminated at column 13"),
        "{}",
        e.message
    );
    let e = Expr::parse("inputs.a @ 1").unwrap_err();
    assert!(
        e.message
            .contains("unrecognized character: U+0040 '@' at column 10")
    );
    let e = Expr::parse("(inputs.a == 1").unwrap_err();
    assert!(e.message.contains("expected `)`"), "{}", e.message);
    let e = Expr::parse("inputs.a ==\n  == 2").unwrap_err();
    assert!(e.message.contains("at line 2, column 3"), "{}", e.message);
    let e = Expr::parse("{{.inputs.x}} == 'a'").unwrap_err();
    assert!(e.message.contains("column 2"), "{}", e.message);
    let e = Expr::parse("1 + * 2").unwrap_err();
    assert!(e.message.contains("expected a value after `+`, found `*`"));
    for unsupported in [
        "all(x, # > 1)",
        "x | len()",
        "1..3",
        "let a = 1; a",
        "a.b()",
    ] {
        let e = Expr::parse(unsupported).unwrap_err();
        assert!(
            e.message.contains("not supported"),
            "{unsupported}: {}",
            e.message
        );
    }
    let e = Expr::parse("12abc == 1").unwrap_err();
    assert!(e.message.contains("bad number syntax"), "{}", e.message);
    yes("0x1f == 31 and 0b101 == 5 and 0o17 == 15 and 1_000 == 1000 and .5 == 0.5");
    yes("1 == 1 // a comment");
    yes("/* a comment */ 1 == 1");
}

#[test]
fn references_list_member_paths() {
    let e = Expr::parse(
        "states.build.ExitCode == 0 and inputs[\"mode\"] == 'x' or \
         len(states.test.Output) > 0 and states.build.ExitCode != 1 and \
         loop.Parent?.Index == 0 and states.build.Response.items[inputs.i].x",
    )
    .unwrap();
    let refs = e.references();
    let refs: Vec<Vec<&str>> = refs
        .iter()
        .map(|p| p.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        refs,
        vec![
            vec!["states", "build", "ExitCode"],
            vec!["inputs", "mode"],
            vec!["states", "test", "Output"],
            vec!["loop", "Parent", "Index"],
            vec!["states", "build", "Response", "items"],
            vec!["inputs", "i"],
        ]
    );
    let e = Expr::parse("contains(states.s.Output, inputs.x)").unwrap();
    assert_eq!(
        e.references(),
        vec![vec!["states", "s", "Output"], vec!["inputs", "x"]]
    );
}

#[test]
fn transition_check_is_awfs_load_check() {
    let ok = |t: &str| Expr::parse(t).unwrap().check_transition();
    assert!(ok("states.build.ExitCode == 0 and inputs.mode == \"full\"").is_ok());
    // AWF's validator does not rewrite `contains(a, b)`: a syntax error at load.
    assert!(ok("contains(states.a.Output, \"x\")").is_err());
    assert!(ok("states.a.Output contains \"x\"").is_ok());
    assert!(ok("has_prefix(states.a.Output, \"x\")").is_ok());
    assert!(ok("inputs.n > 10 ? 'high' : 'low'").is_ok());
    let e = ok("trim(states.test.Output) startsWith \"WARN\"").unwrap_err();
    assert!(
        e.message.contains("unknown name trim at column 1"),
        "{}",
        e.message
    );
    assert!(ok("len(x) > 0").is_err());
    assert!(ok("1 + \"a\" == 2").is_err());
    // The same expressions evaluate (built-ins exist at run time).
    yes("trim(states.test.Output) startsWith \"WARN\"");
}

#[test]
fn go_float_formatting() {
    for (f, s) in [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (1.5, "1.5"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e21, "1e+21"),
        (0.0001, "0.0001"),
        (0.00012, "0.00012"),
        (0.00001, "1e-05"),
        (f64::INFINITY, "+Inf"),
        (f64::NAN, "NaN"),
    ] {
        assert_eq!(go_float(f), s, "{f}");
    }
}
