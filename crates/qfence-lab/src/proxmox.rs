pub struct PveHandle; impl PveHandle { pub fn attach_power(&self) {} }
