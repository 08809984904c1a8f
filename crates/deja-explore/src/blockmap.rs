//! What block coverage says of a program's functions: the report's [`BlockCoverage`] from the
//! image's block map and the round in which each block was first reached.

use std::collections::BTreeMap;

use deja_explore_report::{BlockCoverage, FileLine, FunctionLine};
use deja_vmm::coverage::BlockImage;

/// The report of block coverage over `blocks`, given the round in which each block id was first
/// reached and the `--cover` patterns the blocks were chosen by.
pub fn summarize(blocks: &BlockImage, first_reached: &BTreeMap<u32, u64>, scope: &[String]) -> BlockCoverage {
    summarize_all(&[(blocks, 0)], first_reached, scope)
}

/// [`summarize`] over several programs' blocks in one id space (a cluster's): each with the id
/// of its first block.
pub fn summarize_all(
    parts: &[(&BlockImage, u32)],
    first_reached: &BTreeMap<u32, u64>,
    scope: &[String],
) -> BlockCoverage {
    let mut lines: Vec<FunctionLine> = Vec::new();
    let mut total = 0u64;
    let mut hit = 0u64;
    for &(blocks, first) in parts {
        let base = lines.len();
        lines.extend(blocks.functions().iter().map(|f| FunctionLine {
            name: f.name.clone(),
            file: f.file.clone(),
            ..FunctionLine::default()
        }));
        total += blocks.len() as u64;
        for id in 0..blocks.len() {
            let round = first_reached.get(&(first + id as u32));
            hit += u64::from(round.is_some());
            let Some(f) = blocks.function_of(id) else { continue };
            let line = &mut lines[base + f];
            line.blocks += 1;
            if let Some(&round) = round {
                line.reached += 1;
                line.first_round = Some(line.first_round.map_or(round, |r| r.min(round)));
            }
        }
    }
    let mut firsts: Vec<u64> = lines.iter().filter_map(|l| l.first_round).collect();
    firsts.sort_unstable();
    let mut functions_over_rounds: Vec<(u64, u64)> = Vec::new();
    for (n, round) in firsts.iter().enumerate() {
        match functions_over_rounds.last_mut() {
            Some(last) if last.0 == *round => last.1 = n as u64 + 1,
            _ => functions_over_rounds.push((*round, n as u64 + 1)),
        }
    }
    let mut latest: Vec<FunctionLine> = lines.iter().filter(|l| l.first_round.is_some()).cloned().collect();
    latest.sort_by(|a, b| b.first_round.cmp(&a.first_round).then_with(|| a.name.cmp(&b.name)));
    latest.truncate(BlockCoverage::LISTED);
    let mut never: Vec<FunctionLine> = lines.iter().filter(|l| l.first_round.is_none()).cloned().collect();
    never.sort_by(|a, b| b.blocks.cmp(&a.blocks).then_with(|| a.name.cmp(&b.name)));
    never.truncate(BlockCoverage::LISTED);
    let mut files: BTreeMap<&str, FileLine> = BTreeMap::new();
    for l in &lines {
        let Some(file) = l.file.as_deref() else { continue };
        let e = files.entry(file).or_insert_with(|| FileLine { file: file.to_string(), ..FileLine::default() });
        e.functions += 1;
        e.functions_reached += u64::from(l.first_round.is_some());
        e.blocks += l.blocks;
        e.blocks_reached += l.reached;
    }
    BlockCoverage {
        files: files.into_values().collect(),
        blocks_total: total,
        blocks_hit: hit,
        scope: scope.to_vec(),
        functions_total: lines.len() as u64,
        functions_reached: firsts.len() as u64,
        functions_over_rounds,
        latest,
        never,
    }
}
