use payonce_model::check;
use payonce_model::model::{Bounds, Model};
fn main() {
    let m = Model { bounds: Bounds { reloads: 1, cancels: 1, ..Bounds::NONE }, flaw: None };
    for d in [12usize, 20, 30, 60] { let r = check::run(&m, check::Search { max_depth: d, max_states: 3_000_000, liveness_every: 0, liveness_steps: 0 }); println!("none depth {d}: {} complete={}", r.states, r.complete); }
    let m = Model { bounds: Bounds::FULL, flaw: None };
    for d in [0usize] { let t = std::time::Instant::now(); let r = check::run(&m, check::Search { max_depth: d, max_states: 3_000_000, liveness_every: 0, liveness_steps: 0 }); println!("full depth {d}: {} complete={} {:?}", r.states, r.complete, t.elapsed()); }
    if std::env::var("WALK").is_err() { return; }
    let m = Model { bounds: Bounds { reloads: 1, cancels: 1, ..Bounds::NONE }, flaw: None };
    let mut s = m.init();
    let mut path = vec![];
    let mut seed: u64 = 12345;
    for _ in 0..400 {
        let mut acts = vec![];
        m.actions(&s, true, &mut acts);
        let acts: Vec<_> = acts.into_iter().filter(|a| m.next(&s, a).is_some()).collect();
        if acts.is_empty() { break; }
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let a = acts[(seed >> 33) as usize % acts.len()].clone();
        s = m.next(&s, &a).unwrap();
        path.push(a);
    }
    println!("{}", check::render(&m, &path));
}
